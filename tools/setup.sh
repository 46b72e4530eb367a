#!/usr/bin/env bash
# Installs every package this project needs, from Debian's archive, when it is missing. Idempotent:
# a second run installs nothing and takes a second. Both README commands call it.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap        # Bazel 4.2.3, the build (offline; see WORKSPACE)
  g++ pkg-config
  libabsl-dev            # Status, flags, strings, synchronization
  libgtest-dev libgmock-dev googletest
  libbenchmark-dev
  libdnnl-dev            # oneDNN sgemm: CPU GEMM that picks kernels from the CPU's instruction sets
  libopenblas-dev        # a reference BLAS (@system//:openblas); GEMM runs on oneDNN (tensor/cpu_gemm.h)
  libgloo-dev            # Gloo collectives over TCP (comm/)
  zlib1g-dev             # gzip IDX files
  nlohmann-json3-dev     # safetensors headers
  dataset-fashion-mnist  # /usr/share/datasets/fashion-mnist
  python3-torch          # PyTorch 1.13 CPU for /usr/bin/python3: the benchmark reference and fixture generator
  python3-torchvision    # torchvision 0.14: //nn:resnet_interchange_test's resnet18
  python3-pip            # pip for /usr/bin/python3: Hugging Face's safetensors below
  gnuplot-nox            # plots in bench/
  iproute2               # network namespaces for the multi-host tests
  libopenmpi-dev openmpi-bin  # mpirun, for the test that starts examples/minimal_ddp under a real mpirun
  clang-14 libclang-rt-14-dev  # libFuzzer for tools/fuzz_store_protocol.sh
  slurmd slurmctld slurm-client munge  # a one-node Slurm cluster in tests/slurm_test.sh (about 1.5 min to install)
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}" >/dev/null
fi

# Hugging Face's safetensors (PyPI; Debian has none) for /usr/bin/python3, the PyTorch side of
# //tests:weights_interop_test, which puts this directory on PYTHONPATH. Skipped when importable.
PY_TARGET=/opt/ddpengine-py
if ! PYTHONPATH="$PY_TARGET" /usr/bin/python3 -c "import safetensors.torch" 2>/dev/null; then
  echo "setup: installing safetensors (PyPI) into $PY_TARGET" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO /usr/bin/python3 -m pip install -q --no-warn-script-location --target "$PY_TARGET" safetensors
fi
