#!/usr/bin/env bash
# The device check of the CUDA backend (issue 7), in two halves:
#
#   tools/gpu_check.sh bundle        (here: Bazel, no GPU) builds --config=cuda and gathers the CUDA test
#                                    binaries, the GPU benchmark and the non-CUDA shared libraries they
#                                    need (from ldd: Abseil, Gloo, oneDNN, GoogleTest, ...) into gpu_bundle/
#                                    (ignored by git; must stay <= 64 MiB, checked).
#   tools/gpu_check.sh run OUT_DIR   (on the GPU machine: no Bazel) runs the bundled tests and the
#                                    benchmark with LD_LIBRARY_PATH pointing at the bundle, writing logs
#                                    and a summary into OUT_DIR. Exit status 0 only if every test passed.
#
# CUDA's own libraries (cudart, cuBLAS, NCCL) are not bundled: the GPU machine has them.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUNDLE="${ROOT}/gpu_bundle"
TESTS=(tensor/cuda/cuda_ops_test comm/process_group_nccl_test)
BENCH=bench/gpu_bench
LIMIT_BYTES=$((64 * 1024 * 1024))

bundle() {
  cd "${ROOT}"
  local start=$SECONDS
  local labels=()
  for target in "${TESTS[@]}" "${BENCH}"; do labels+=("//${target%/*}:${target##*/}"); done
  bazel build --config=cuda "${labels[@]}" 2>&1 | tail -3
  echo "build took $((SECONDS - start)) s"
  rm -rf "${BUNDLE}"
  mkdir -p "${BUNDLE}/bin" "${BUNDLE}/lib"
  for target in "${TESTS[@]}" "${BENCH}"; do
    cp "bazel-bin/${target}" "${BUNDLE}/bin/$(basename "${target}")"
  done
  # Every shared library the binaries load, except the C runtime and CUDA's own.
  for bin in "${BUNDLE}"/bin/*; do
    ldd "${bin}" | awk '/=> \//{print $3}'
  done | sort -u | while read -r lib; do
    case "$(basename "${lib}")" in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libgcc_s.so*) continue ;;
      libcuda.so*|libcudart.so*|libcublas*.so*|libnccl.so*|libnvidia*|libcudnn*) continue ;;
    esac
    cp -L "${lib}" "${BUNDLE}/lib/"
  done
  strip --strip-unneeded "${BUNDLE}"/lib/*.so* 2>/dev/null || true
  cp "${ROOT}/tools/gpu_check.sh" "${BUNDLE}/"
  cp "${ROOT}/bench/pytorch_gpu_reference.py" "${BUNDLE}/"
  local size
  size=$(du -sb "${BUNDLE}" | cut -f1)
  echo "gpu_bundle: $(du -sh "${BUNDLE}" | cut -f1) (${size} bytes) in $(ls "${BUNDLE}/lib" | wc -l) libraries"
  du -sh "${BUNDLE}"/bin/* "${BUNDLE}"/lib/* | sort -h | tail -8
  if (( size > LIMIT_BYTES )); then
    echo "gpu_bundle is over 64 MiB" >&2
    exit 1
  fi
}

run() {
  local out="${1:?usage: gpu_check.sh run OUT_DIR}"
  mkdir -p "${out}"
  local here
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  # Run from inside the bundle (copied there by `bundle`) or from the repo root with gpu_bundle/.
  local bundle="${here}"
  [[ -d "${bundle}/bin" ]] || bundle="${ROOT}/gpu_bundle"
  export LD_LIBRARY_PATH="${bundle}/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}"
  nvidia-smi > "${out}/nvidia-smi.txt" 2>&1 || true
  local failed=0
  for bin in cuda_ops_test process_group_nccl_test; do
    if "${bundle}/bin/${bin}" --gtest_output="xml:${out}/${bin}.xml" > "${out}/${bin}.log" 2>&1; then
      echo "${bin}: PASSED" | tee -a "${out}/summary.txt"
    else
      echo "${bin}: FAILED (see ${bin}.log)" | tee -a "${out}/summary.txt"
      failed=1
    fi
    grep -E "SKIPPED|FAILED|PASSED" "${out}/${bin}.log" | tail -5 || true
  done
  timeout 300 "${bundle}/bin/gpu_bench" > "${out}/gpu_bench.txt" 2>&1 || echo "gpu_bench failed" >> "${out}/summary.txt"
  DDP_CUDA_TF32=1 timeout 60 "${bundle}/bin/gpu_bench" --only=sgemm >> "${out}/gpu_bench.txt" 2>&1 || true
  cat "${out}/gpu_bench.txt"
  if command -v python3 > /dev/null; then
    env -u LD_LIBRARY_PATH timeout 300 python3 "${bundle}/pytorch_gpu_reference.py" > "${out}/pytorch_gpu_reference.txt" 2>&1 || true
    cat "${out}/pytorch_gpu_reference.txt"
  fi
  return "${failed}"
}

case "${1:-}" in
  bundle) bundle ;;
  run) shift; run "$@" ;;
  *) echo "usage: $0 bundle | run OUT_DIR" >&2; exit 2 ;;
esac
