#!/usr/bin/env bash
# The device check of the CUDA backend, in two halves:
#
#   tools/gpu_check.sh bundle        (here: Bazel, no GPU) builds --config=cuda and gathers the CUDA test
#                                    binaries, the GPU benchmark, train/train, the non-CUDA shared
#                                    libraries they need (from ldd: Abseil, Gloo, oneDNN, GoogleTest, ...;
#                                    xz-compressed, oneDNN alone is 38 MB; the test binaries xz-compressed
#                                    too) and Fashion-MNIST into
#                                    gpu_bundle/ (ignored by git; must stay <= 64 MiB, checked).
#   tools/gpu_check.sh test_labels   the Bazel labels of the bundled CUDA tests, one per line (tools/test.sh
#                                    runs exactly these under --config=cuda, so the list cannot rot).
#   tools/gpu_check.sh run OUT_DIR   (on the GPU machine: no Bazel) unpacks the libraries, runs the
#                                    bundled tests, the benchmark, and cnn training for 2 epochs on the GPU
#                                    and on the CPU (same seed: the accuracies must agree within 1 point),
#                                    and with --precision=bf16 and fp16 on the GPU (within 0.3 points of
#                                    the GPU's float32 run), plus gpu_bench --only=bf16 beside PyTorch's
#                                    bf16 autocast, and resnet18 for one epoch on a synthetic folder of
#                                    CIFAR-10's shapes with crops and flips (a clean run and its speed),
#                                    writing logs and a summary into OUT_DIR. Exit status 0 only if every
#                                    test passed.
#
# CUDA's own libraries (cudart, cuBLAS, NCCL) are not bundled: the GPU machine has them.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUNDLE="${ROOT}/gpu_bundle"
TESTS=(tensor/cuda/cuda_ops_test comm/nccl/process_group_nccl_test nn/optimizer_cuda_test tests/nccl_ddp_test
       tests/gloo_cuda_ddp_test dp/data_parallel_cuda_test ddp/cuda_backward_timer_test comm/host_staging_test nn/resnet_cuda_test
       tensor/cuda/autocast_cuda_test nn/grad_scaler_cuda_test reducer/reduce_dtype_cuda_test)
BENCH=bench/gpu_bench
TRAIN=train/train
LAUNCHER=launch/ddprun
DATA=/usr/share/datasets/fashion-mnist
LIMIT_BYTES=$((64 * 1024 * 1024))

bundle() {
  cd "${ROOT}"
  local start=$SECONDS
  local labels=()
  for target in "${TESTS[@]}" "${BENCH}" "${TRAIN}" "${LAUNCHER}"; do labels+=("//${target%/*}:${target##*/}"); done
  # Static linking of our own libraries: cc_test binaries otherwise load them from Bazel's _solib
  # folders through relative rpaths, which do not survive the copy.
  bazel build --config=cuda --dynamic_mode=off "${labels[@]}" 2>&1 | grep -v "^\[" | tail -8
  echo "build took $((SECONDS - start)) s"
  rm -rf "${BUNDLE}"
  mkdir -p "${BUNDLE}/bin" "${BUNDLE}/lib"
  local bin_dir
  bin_dir="$(bazel info --config=cuda --dynamic_mode=off bazel-bin 2>/dev/null)"
  for target in "${TESTS[@]}" "${BENCH}" "${TRAIN}" "${LAUNCHER}"; do
    cp "${bin_dir}/${target}" "${BUNDLE}/bin/$(basename "${target}")"
  done
  # Every shared library the binaries load, except the C runtime and CUDA's own. One that ldd cannot
  # find here would be missing there too.
  if ldd "${BUNDLE}"/bin/* | grep -v -E "libcuda\.so|libnvidia" | grep -q "not found"; then
    ldd "${BUNDLE}"/bin/* | grep "not found" >&2
    echo "gpu_bundle: a binary needs a library that is not found" >&2
    exit 1
  fi
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
  tar -C "${BUNDLE}" -cf - lib | xz -T0 -6 > "${BUNDLE}/lib.tar.xz"
  rm -rf "${BUNDLE}/lib"
  # The test binaries travel xz-compressed too (each holds our statically linked libraries; several MB).
  local test_bins=("${TESTS[@]##*/}")
  tar -C "${BUNDLE}/bin" -cf - "${test_bins[@]}" | xz -T0 -6 > "${BUNDLE}/tests.tar.xz"
  for bin in "${test_bins[@]}"; do rm "${BUNDLE}/bin/${bin}"; done
  mkdir -p "${BUNDLE}/fashion-mnist"
  cp "${DATA}"/*.gz "${BUNDLE}/fashion-mnist/"
  cp "${ROOT}/tools/gpu_check.sh" "${BUNDLE}/"
  cp "${ROOT}/bench/pytorch_gpu_reference.py" "${ROOT}/tools/reference_models.py" "${ROOT}/tools/synthetic_cifar10.py" \
    "${BUNDLE}/"
  local size
  size=$(du -sb "${BUNDLE}" | cut -f1)
  echo "gpu_bundle: $(du -sh "${BUNDLE}" | cut -f1) (${size} bytes)"
  du -sh "${BUNDLE}"/bin/* "${BUNDLE}"/lib.tar.xz "${BUNDLE}"/tests.tar.xz "${BUNDLE}"/fashion-mnist | sort -h | tail -8
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
  local libs="${TMPDIR:-/tmp}/ddp_gpu_check_lib"
  rm -rf "${libs}" && mkdir -p "${libs}"
  xz -dc "${bundle}/lib.tar.xz" | tar -C "${libs}" -xf -
  local tests_dir="${TMPDIR:-/tmp}/ddp_gpu_check_tests"
  rm -rf "${tests_dir}" && mkdir -p "${tests_dir}"
  xz -dc "${bundle}/tests.tar.xz" | tar -C "${tests_dir}" -xf -
  export LD_LIBRARY_PATH="${libs}/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}"
  nvidia-smi > "${out}/nvidia-smi.txt" 2>&1 || true
  local failed=0
  for bin in "${TESTS[@]##*/}"; do
    if "${tests_dir}/${bin}" --gtest_output="xml:${out}/${bin}.xml" > "${out}/${bin}.log" 2>&1; then
      echo "${bin}: PASSED" | tee -a "${out}/summary.txt"
    else
      echo "${bin}: FAILED (see ${bin}.log)" | tee -a "${out}/summary.txt"
      failed=1
    fi
    grep -E "SKIPPED|FAILED|PASSED" "${out}/${bin}.log" | tail -5 || true
  done
  timeout 300 "${bundle}/bin/gpu_bench" > "${out}/gpu_bench.txt" 2>&1 || echo "gpu_bench failed" >> "${out}/summary.txt"
  DDP_CUDA_TF32=1 timeout 60 "${bundle}/bin/gpu_bench" --only=sgemm >> "${out}/gpu_bench.txt" 2>&1 || true
  timeout 240 "${bundle}/bin/gpu_bench" --only=bf16 >> "${out}/gpu_bench.txt" 2>&1 || echo "gpu_bench --only=bf16 failed" >> "${out}/summary.txt"
  cat "${out}/gpu_bench.txt"
  train_check "${bundle}" "${out}" || failed=1
  # ddprun --nproc_per_node=gpu starts one worker per visible GPU (launch/local_devices.h).
  local gpus workers
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  workers=$(timeout 60 "${bundle}/bin/ddprun" --nproc_per_node=gpu --master_port=0 /bin/sh -c 'echo W=$LOCAL_WORLD_SIZE' 2>&1 |
            grep -oE 'W=[0-9]+' | sort -u || true)
  if [[ "${workers}" == "W=${gpus}" ]]; then
    echo "ddprun --nproc_per_node=gpu: ${gpus} worker(s): PASSED" | tee -a "${out}/summary.txt"
  else
    echo "ddprun --nproc_per_node=gpu: '${workers}' for ${gpus} GPU(s): FAILED" | tee -a "${out}/summary.txt"
    failed=1
  fi
  # --virtual_local_rank: every worker LOCAL_RANK=0 and one device of its own (launch/virtual_local_rank.h).
  local virtual expected
  virtual=$(timeout 60 "${bundle}/bin/ddprun" --nproc_per_node=gpu --virtual_local_rank --master_port=0 /bin/sh -c \
            'echo V=$LOCAL_RANK/$CUDA_VISIBLE_DEVICES' 2>&1 | grep -oE 'V=[0-9]+/[0-9A-Za-z-]+' | sort | tr '\n' ' ' || true)
  expected=$(IFS=,; for d in ${CUDA_VISIBLE_DEVICES:-$(seq -s, 0 $((gpus - 1)))}; do echo "V=0/$d"; done | sort | tr '\n' ' ')
  if [[ "${virtual}" == "${expected}" ]]; then
    echo "ddprun --virtual_local_rank: ${virtual}: PASSED" | tee -a "${out}/summary.txt"
  else
    echo "ddprun --virtual_local_rank: '${virtual}', expected '${expected}': FAILED" | tee -a "${out}/summary.txt"
    failed=1
  fi
  if command -v python3 > /dev/null; then
    env -u LD_LIBRARY_PATH timeout 300 python3 "${bundle}/pytorch_gpu_reference.py" > "${out}/pytorch_gpu_reference.txt" 2>&1 || true
    env -u LD_LIBRARY_PATH timeout 240 python3 "${bundle}/pytorch_gpu_reference.py" --bf16 >> "${out}/pytorch_gpu_reference.txt" 2>&1 || true
    cat "${out}/pytorch_gpu_reference.txt"
  fi
  return "${failed}"
}

# cnn on the GPU against cnn on the CPU: same flags and seed, 2 epochs; accuracies within 1 point.
train_check() {
  local bundle="$1" out="$2"
  local flags=(--model=cnn --epochs=2 --data_dir="${bundle}/fashion-mnist")
  local start=$SECONDS
  timeout 300 "${bundle}/bin/train" "${flags[@]}" --device=cuda --metrics_out="${out}/train_cuda.jsonl" \
    > "${out}/train_cuda.log" 2>&1 || { echo "train --device=cuda: FAILED (see train_cuda.log)" | tee -a "${out}/summary.txt"; return 1; }
  echo "train --device=cuda: $((SECONDS - start)) s" | tee -a "${out}/summary.txt"
  start=$SECONDS
  timeout 300 "${bundle}/bin/train" "${flags[@]}" --device=cpu --threads="$(nproc)" \
    --metrics_out="${out}/train_cpu.jsonl" > "${out}/train_cpu.log" 2>&1 ||
    { echo "train --device=cpu: FAILED (see train_cpu.log)" | tee -a "${out}/summary.txt"; return 1; }
  echo "train --device=cpu --threads=$(nproc): $((SECONDS - start)) s" | tee -a "${out}/summary.txt"
  local gpu cpu
  gpu=$(awk '/final test_acc/{print $3}' "${out}/train_cuda.log")
  cpu=$(awk '/final test_acc/{print $3}' "${out}/train_cpu.log")
  local status=0
  if awk -v g="${gpu}" -v c="${cpu}" 'BEGIN{d = g - c; if (d < 0) d = -d; exit !(g != "" && d <= 0.01)}'; then
    echo "cnn accuracy: gpu ${gpu} cpu ${cpu}: PASSED (within 1 point)" | tee -a "${out}/summary.txt"
  else
    echo "cnn accuracy: gpu ${gpu} cpu ${cpu}: FAILED (differ by more than 1 point)" | tee -a "${out}/summary.txt"
    status=1
  fi
  precision_check "${bundle}" "${out}" "${gpu}" || status=1
  cifar_check "${bundle}" "${out}" || status=1
  return "${status}"
}

# resnet18 on the GPU for one epoch of a synthetic CIFAR-10 folder (random pixels: a clean run of
# --dataset=cifar10 with crops and flips, and its samples/s; no accuracy to compare).
cifar_check() {
  local bundle="$1" out="$2"
  if ! command -v python3 > /dev/null; then
    echo "train --dataset=cifar10 --model=resnet18: SKIPPED (no python3 to write the synthetic folder)" | tee -a "${out}/summary.txt"
    return 0
  fi
  python3 "${bundle}/synthetic_cifar10.py" "${out}/cifar10" 10000 2000 > /dev/null
  local start=$SECONDS
  if ! timeout 300 "${bundle}/bin/train" --device=cuda --dataset=cifar10 --data_dir="${out}/cifar10" --model=resnet18 \
      --epochs=1 --batch_size=128 --random_crop_padding=4 --random_flip > "${out}/train_cuda_cifar10.log" 2>&1; then
    echo "train --dataset=cifar10 --model=resnet18 --device=cuda: FAILED (see train_cuda_cifar10.log)" | tee -a "${out}/summary.txt"
    return 1
  fi
  echo "train --dataset=cifar10 --model=resnet18 --device=cuda: $((SECONDS - start)) s; $(grep -o '[0-9]* samples/s' \
    "${out}/train_cuda_cifar10.log" | tail -1)" | tee -a "${out}/summary.txt"
}

# cnn on the GPU with --precision=bf16 and fp16 (autocast on CUDA, fp16 with its GradScaler), the same flags
# and seed as the float32 GPU run: test accuracy within 0.3 points of it.
precision_check() {
  local bundle="$1" out="$2" fp32="$3" failed=0
  local flags=(--model=cnn --epochs=2 --data_dir="${bundle}/fashion-mnist" --device=cuda)
  for precision in bf16 fp16; do
    local start=$SECONDS
    if ! timeout 300 "${bundle}/bin/train" "${flags[@]}" --precision="${precision}" \
        --metrics_out="${out}/train_cuda_${precision}.jsonl" > "${out}/train_cuda_${precision}.log" 2>&1; then
      echo "train --device=cuda --precision=${precision}: FAILED (see train_cuda_${precision}.log)" | tee -a "${out}/summary.txt"
      failed=1
      continue
    fi
    echo "train --device=cuda --precision=${precision}: $((SECONDS - start)) s" | tee -a "${out}/summary.txt"
    local acc
    acc=$(awk '/final test_acc/{print $3}' "${out}/train_cuda_${precision}.log")
    if awk -v a="${acc}" -v f="${fp32}" 'BEGIN{d = a - f; if (d < 0) d = -d; exit !(a != "" && d <= 0.003)}'; then
      echo "cnn accuracy: cuda ${precision} ${acc} cuda fp32 ${fp32}: PASSED (within 0.3 points)" | tee -a "${out}/summary.txt"
    else
      echo "cnn accuracy: cuda ${precision} ${acc} cuda fp32 ${fp32}: FAILED (differ by more than 0.3 points)" | tee -a "${out}/summary.txt"
      failed=1
    fi
  done
  return "${failed}"
}

test_labels() {
  for target in "${TESTS[@]}"; do echo "//${target%/*}:${target##*/}"; done
}

case "${1:-}" in
  bundle) bundle ;;
  test_labels) test_labels ;;
  run) shift; run "$@" ;;
  *) echo "usage: $0 bundle | test_labels | run OUT_DIR" >&2; exit 2 ;;
esac
