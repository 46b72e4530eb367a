// bfloat16 GEMM with float32 accumulation on the CPU, for mixed precision (tensor/autocast.h), with two
// kernels that give the same numbers up to the order of the float32 sums:
//
//   kOneDnn   oneDNN's bf16 matmul (AMX tiles where the CPU and the kernel allow them, else AVX512_BF16's
//             vdpbf16ps, else oneDNN's own emulation).
//   kFloat32  the operands widened to float32 (exact) and multiplied by cpu::Gemm (oneDNN's sgemm).
//
// Note [bf16 GEMM kernel choice]
// A bf16 GEMM is faster than a float32 one only where the CPU multiplies bf16 faster than it does float32
// FMAs. AMX does (PyTorch 2.15's torch.mm 2048^3 on one core of an AMX Xeon: fp32 154 GFLOP/s, bf16
// 1,030). Without AMX it depends on the CPU. On an AMD EPYC of family 26, vdpbf16ps issues as often as
// vfmadd231ps and so does twice its arithmetic (one core: 578 against 288 GFLOP/s, bench/bf16_probe), and
// oneDNN 2.6's bf16 matmul runs 1.8-2.0x its sgemm at training shapes (tensor/bf16_gemm_bench.cc). On an
// Intel Xeon with AVX512_BF16 and no AMX (family 6 model 207) every library's bf16 GEMM ran at about half
// its float32 one: oneDNN 2.6's matmul 75-89 GFLOP/s against its sgemm's 133-173, Intel MKL and PyTorch
// 2.15's own oneDNN the same (BENCHMARKS.md "bf16 mixed precision" has the commands). kAuto therefore
// picks kOneDnn where oneDNN reports AMX usable (dnnl_get_effective_cpu_isa), kFloat32 where it reports
// no AVX512_BF16, and in between measures: the first bf16 GEMM of the process times both kernels at
// 64x784x576 (a few milliseconds, best of five calls each) and keeps oneDNN where it ran at least 1.2x
// faster. The two kernels give the same numbers up to the order of the float32 sums. The line printed
// once on stderr names the kernel, why, and the ratio measured. DDP_BF16_GEMM=onednn|fp32 in the
// environment (read once, at the first bf16 GEMM) or SetBf16GemmKernel overrides the choice.
#ifndef DDP_TENSOR_CPU_GEMM_BF16_H_
#define DDP_TENSOR_CPU_GEMM_BF16_H_

#include <cstdint>
#include <string>

#include "tensor/dtype.h"

namespace ddp {
namespace cpu {

enum class Bf16GemmKernel { kAuto, kOneDnn, kFloat32 };

// kAuto keeps oneDNN's bf16 matmul on a CPU with AVX512_BF16 and no AMX only where it measured at least
// this much faster than the float32 path (Note [bf16 GEMM kernel choice]): the two measure 0.5-0.6x or
// 1.8-2x apart on the CPUs seen, and the margin keeps timing noise from choosing a kernel that is no faster.
inline constexpr double kMinOneDnnSpeedup = 1.2;

// Row-major C[m, n] = op(A) * op(B) + beta * C with bf16 A and B, float32 C and float32 accumulation;
// op(X) = X or X^T (trans_a / trans_b); lda/ldb/ldc are the row strides as stored. The same contract as
// the float32 cpu::Gemm (tensor/cpu_gemm.h), so templated kernels call either. REQUIRES: alpha == 1 and
// beta is 0 or 1 (checked). Thread-safe; kernel threads as SetNumThreads.
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a,
          int64_t lda, const BFloat16* b, int64_t ldb, float beta, float* c, int64_t ldc);

// Chooses the kernel for the bf16 GEMMs that follow (kAuto: the environment, else Note [bf16 GEMM kernel
// choice]). Call while no bf16 GEMM runs (tests, start-up). Dies naming the reason for kOneDnn where
// OneDnnBf16MatmulAvailable() is false.
void SetBf16GemmKernel(Bf16GemmKernel kernel);

// Whether oneDNN has a bf16 matmul on this CPU at all (its own emulation included; none where it may use
// no more than AVX2, e.g. a CPU without AVX-512, or ONEDNN_MAX_CPU_ISA=AVX2). Where it has none, kAuto
// picks kFloat32, and DDP_BF16_GEMM=onednn stops the process at the first bf16 GEMM with a message saying
// so instead of an error from inside oneDNN. Probed once (a small primitive descriptor).
bool OneDnnBf16MatmulAvailable();

// "onednn" or "fp32": the kernel as DDP_BF16_GEMM names it. REQUIRES: kernel != kAuto (checked).
const char* Bf16GemmKernelName(Bf16GemmKernel kernel);

// The bf16 instructions oneDNN can use on this CPU: "amx", "avx512_bf16" (without AMX) or "none". A
// virtual machine may hide some of its CPU's, so two CPUs of one model can differ here.
const char* Bf16Instructions();

// The kernel DDP_BF16_GEMM pins: kOneDnn or kFloat32, or kAuto where it is unset, empty or "auto". Reads
// the environment on every call and measures nothing. Dies naming the value when it is anything else.
Bf16GemmKernel Bf16GemmKernelFromEnvironment();

// The kernel the bf16 GEMMs use now (never kAuto).
Bf16GemmKernel ActiveBf16GemmKernel();

// True when the bf16 GEMMs run on AMX tiles: the active kernel is oneDNN's and oneDNN uses AMX on this CPU
// (not kept off it by ONEDNN_MAX_CPU_ISA). oneDNN's bf16 convolution primitives then run on AMX as well.
bool Bf16GemmsOnAmx();

// True when Gemm(trans_a, trans_b, m, n, k, 1, ., lda, ., ldb, beta, ., ldc) with beta 1 where `accumulate`
// (else 0) runs on oneDNN's AMX brgemm matmul: the active kernel is oneDNN's on AMX and oneDNN picks its
// "brg:avx512_core_amx" implementation for that shape (for small shapes it may pick an AVX-512 one, which
// sums in another order). Asks oneDNN once per shape and kernel thread count. Thread-safe.
bool GemmOnAmxBrgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                     int64_t ldc, bool accumulate);

// One line naming the active kernel, why it was chosen and what it costs on this CPU; printed once to
// stderr by the first bf16 GEMM of the process.
std::string Bf16GemmKernelDescription();

}  // namespace cpu
}  // namespace ddp

#endif  // DDP_TENSOR_CPU_GEMM_BF16_H_
