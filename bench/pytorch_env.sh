# Sourced by the benchmarks that run bench/pytorch_reference.py: chooses the PyTorch they compare with.
# Contract: sets TORCH_PY (the Python that runs the reference) and TORCH_VERSION, exports one-thread
# settings for PyTorch's OpenMP, MKL and OpenBLAS (their pools otherwise start threads on every core,
# whatever torch.set_num_threads says) and THP_MEM_ALLOC_ENABLE=1 (PyTorch's CPU allocator then places
# blocks of 2 MiB and up on transparent huge pages, as ours places its heap, Note [Huge pages for the
# heap]; a caller's own setting is kept), and exits naming the fix when that Python has no torch.
# The default is PyTorch 2.x from PyPI in /opt/torch2 (MKL and oneDNN with AVX-512/AMX kernels: the
# strongest reference a user installs); TORCH_PYTHON=/usr/bin/python3 compares with Debian's 1.13.
TORCH_PY=${TORCH_PYTHON:-/opt/torch2/bin/python}
if ! TORCH_VERSION=$("$TORCH_PY" -c 'import torch; print(torch.__version__)' 2>/dev/null); then
  echo "error: $TORCH_PY cannot import torch. Install PyTorch 2.x from PyPI:" >&2
  echo "  python3 -m venv /opt/torch2 && /opt/torch2/bin/pip install torch numpy" >&2
  echo "or set TORCH_PYTHON=/usr/bin/python3 for Debian's python3-torch." >&2
  exit 1
fi
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export THP_MEM_ALLOC_ENABLE=${THP_MEM_ALLOC_ENABLE:-1}
echo "# reference: PyTorch $TORCH_VERSION ($TORCH_PY)" >&2
