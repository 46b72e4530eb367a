#!/usr/bin/env bash
# Which library gives this CPU's bf16 units a speed-up over float32, one core (BENCHMARKS.md "bf16 mixed
# precision"): the instruction issue rate of vdpbf16ps against vfmadd231ps, Intel MKL's bf16 GEMM against its
# sgemm (MKL from PyPI, installed into a virtual environment outside the repo: the engine does not link it),
# and PyTorch 2.x's torch.mm in both dtypes when /opt/torch2 exists. Prints the CPU model and its bf16/AMX
# flags first.
#
#   bash bench/bf16_probe/run.sh [--core=1] [--venv=/tmp/bf16_probe_venv]
#
# Run it under `chrt -f 5` on a busy machine. Needs gcc and network access to PyPI for the MKL part (skipped,
# saying so, when pip cannot install it).
set -uo pipefail
CORE=1 VENV=/tmp/bf16_probe_venv
for arg in "$@"; do
  case "$arg" in
    --core=*) CORE="${arg#*=}" ;;
    --venv=*) VENV="${arg#*=}" ;;
    *) echo "bf16_probe: unknown argument $arg (flags: --core=N --venv=DIR)" >&2; exit 2 ;;
  esac
done
HERE="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=bench/probe_env.sh
source "$HERE/../probe_env.sh"

print_cpu 'amx[a-z_0-9]*|avx512_bf16'

gcc -O2 -o "$BUILD/dot_throughput" "$HERE/dot_throughput.c" || exit 1
taskset -c "$CORE" "$BUILD/dot_throughput" 7

if [[ ! -e "$VENV/include/mkl.h" ]]; then
  { python3 -m venv "$VENV" && timeout 600 "$VENV/bin/pip" install -q mkl-devel mkl-include; } > "$BUILD/pip.log" 2>&1 ||
    echo "bf16_probe: could not install MKL from PyPI into $VENV (see pip's output below); MKL skipped" >&2
fi
if [[ -e "$VENV/include/mkl.h" ]]; then
  lib="$VENV/lib"
  gcc -O2 -o "$BUILD/mkl_gemm" "$HERE/mkl_gemm.c" -I"$VENV/include" "$lib"/libmkl_intel_lp64.so.? \
    "$lib"/libmkl_sequential.so.? "$lib"/libmkl_core.so.? -Wl,-rpath,"$lib" -lpthread -lm -ldl &&
    taskset -c "$CORE" "$BUILD/mkl_gemm"
else
  cat "$BUILD/pip.log" >&2
fi

if [[ -x /opt/torch2/bin/python ]]; then
  OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 taskset -c "$CORE" /opt/torch2/bin/python - <<'PY'
import time, torch
torch.set_num_threads(1)
for m, n, k in [(2048, 2048, 2048), (64, 512, 784), (3136, 64, 576)]:
    best = {}
    for dtype in (torch.float32, torch.bfloat16):
        a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
        torch.mm(a, b), torch.mm(a, b)
        reps = max(5, int(2e10 / (2 * m * n * k)))
        t = min(timed for timed in ((lambda s: (torch.mm(a, b), time.perf_counter() - s)[1])(time.perf_counter())
                                    for _ in range(reps)))
        best[dtype] = 2 * m * n * k / t * 1e-9
    print(f"torch {torch.__version__} torch.mm {m} x {n} x {k}: fp32 {best[torch.float32]:.1f} GFLOP/s, "
          f"bf16 {best[torch.bfloat16]:.1f} GFLOP/s, bf16/fp32 {best[torch.bfloat16] / best[torch.float32]:.2f}x")
PY
else
  echo "bf16_probe: /opt/torch2 (PyTorch 2.x, FACTS.md) not installed; torch.mm skipped"
fi
