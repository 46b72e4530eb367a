#include "tensor/cpu_gemm_bf16.h"

#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "base/check.h"
#include "base/environment_choice.h"
#include "tensor/bf16_convert.h"
#include "tensor/cpu_gemm.h"
#include "tensor/thread_scratch.h"
#include "tensor/threads.h"

namespace ddp {
namespace cpu {
namespace {

std::atomic<Bf16GemmKernel> requested_kernel{Bf16GemmKernel::kAuto};

bool OneDnnHasAmx() {
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  return (static_cast<unsigned>(isa) & dnnl_cpu_isa_avx512_core_amx) == dnnl_cpu_isa_avx512_core_amx;
}

bool OneDnnHasAvx512Bf16() {
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  return (static_cast<unsigned>(isa) & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
}

// The shape, layout and beta of one GEMM and the kernel thread count it runs at: the key of the primitive
// cache (oneDNN fixes a primitive's team size when it creates it).
using GemmKey = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, int>;

// A oneDNN matmul for one GemmKey, with its memory objects (their data handles are set per call).
struct MatmulPlan {
  dnnl::matmul primitive;
  dnnl::memory a, b, c;
};

const dnnl::engine& CpuEngine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// The matmul primitive descriptor of one GemmKey (the team size is the calling thread's, as the key says).
dnnl::matmul::primitive_desc MakePrimitiveDesc(const GemmKey& key) {
  const auto [trans_a, trans_b, m, n, k, lda, ldb, ldc, accumulate, threads] = key;
  using dt = dnnl::memory::data_type;
  const dnnl::memory::desc a_md({m, k}, dt::bf16, trans_a ? dnnl::memory::dims{1, lda} : dnnl::memory::dims{lda, 1});
  const dnnl::memory::desc b_md({k, n}, dt::bf16, trans_b ? dnnl::memory::dims{1, ldb} : dnnl::memory::dims{ldb, 1});
  const dnnl::memory::desc c_md({m, n}, dt::f32, dnnl::memory::dims{ldc, 1});
  dnnl::primitive_attr attr;
  if (accumulate) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, c_md), attr, CpuEngine());
}

MatmulPlan MakePlan(const GemmKey& key) {
  const dnnl::matmul::primitive_desc pd = MakePrimitiveDesc(key);
  return MatmulPlan{dnnl::matmul(pd), dnnl::memory(pd.src_desc(), CpuEngine(), nullptr),
                    dnnl::memory(pd.weights_desc(), CpuEngine(), nullptr),
                    dnnl::memory(pd.dst_desc(), CpuEngine(), nullptr)};
}

void OneDnnGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const BFloat16* a, int64_t lda,
                const BFloat16* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  // Plans are per thread: a dnnl::memory's data handle is per call state. Training shapes repeat every
  // step, so the cache stays as small as the model's set of GEMM shapes.
  thread_local std::map<GemmKey, MatmulPlan> plans;
  thread_local dnnl::stream stream(CpuEngine());
  const GemmKey key{trans_a, trans_b, m, n, k, lda, ldb, ldc, beta != 0.0f, GetNumThreads()};
  auto it = plans.find(key);
  if (it == plans.end()) it = plans.emplace(key, MakePlan(key)).first;
  MatmulPlan& plan = it->second;
  plan.a.set_data_handle(const_cast<BFloat16*>(a));
  plan.b.set_data_handle(const_cast<BFloat16*>(b));
  plan.c.set_data_handle(c);
  plan.primitive.execute(stream, {{DNNL_ARG_SRC, plan.a}, {DNNL_ARG_WEIGHTS, plan.b}, {DNNL_ARG_DST, plan.c}});
  stream.wait();
}

// The rows x cols block of a row-major bf16 matrix with row stride ld, widened into a dense float32
// buffer (row stride cols).
void WidenBlock(const BFloat16* src, int64_t rows, int64_t cols, int64_t ld, float* dst) {
  if (ld == cols) {
    BFloat16ToFloatArray(src, dst, rows * cols);
    return;
  }
  for (int64_t r = 0; r < rows; ++r) BFloat16ToFloatArray(src + r * ld, dst + r * cols, cols);
}

// Owner of the per-thread float32 buffers for the widened operands (slot 0 A, slot 1 B).
struct WideScratch {};

void Float32Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const BFloat16* a, int64_t lda,
                 const BFloat16* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  // As stored, A is [m, k] (or [k, m] transposed) and B is [k, n] (or [n, k]).
  const int64_t a_rows = trans_a ? k : m, a_cols = trans_a ? m : k;
  const int64_t b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
  float* wa = ThreadScratch<WideScratch, float, 2>(0, a_rows * a_cols);
  float* wb = ThreadScratch<WideScratch, float, 2>(1, b_rows * b_cols);
  WidenBlock(a, a_rows, a_cols, lda, wa);
  WidenBlock(b, b_rows, b_cols, ldb, wb);
  Gemm(trans_a, trans_b, m, n, k, 1.0f, wa, std::max<int64_t>(a_cols, 1), wb, std::max<int64_t>(b_cols, 1), beta,
       c, ldc);
}

// Best wall-clock seconds of `reps` calls of fn, after one untimed call (primitive creation, scratch).
template <typename Fn>
double BestSeconds(int reps, Fn fn) {
  fn();
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

// Speed of oneDNN's bf16 matmul over the float32 GEMM of the widened operands (widening included), on
// this CPU and thread count, at kCalibrationShape (Note [bf16 GEMM kernel choice]). The best of several
// calls each is what a busy machine disturbs least.
constexpr int64_t kCalibrationShape[3] = {64, 784, 576};
double MeasureOneDnnSpeedup() {
  const int64_t m = kCalibrationShape[0], n = kCalibrationShape[1], k = kCalibrationShape[2];
  std::vector<BFloat16> a(m * k), b(k * n);
  for (int64_t i = 0; i < m * k; ++i)
    a[i].bits = FloatToBFloat16(static_cast<float>(i % 17) * 0.0625f - 0.5f);
  for (int64_t i = 0; i < k * n; ++i)
    b[i].bits = FloatToBFloat16(static_cast<float>(i % 13) * 0.125f - 0.75f);
  std::vector<float> c(m * n);
  constexpr int kReps = 5;
  const double onednn = BestSeconds(
      kReps, [&] { OneDnnGemm(false, false, m, n, k, a.data(), k, b.data(), n, 0.0f, c.data(), n); });
  const double fp32 = BestSeconds(
      kReps, [&] { Float32Gemm(false, false, m, n, k, a.data(), k, b.data(), n, 0.0f, c.data(), n); });
  return fp32 / onednn;
}

// What kAuto resolved to, and the speed ratio measured for it (0 where nothing was measured).
struct AutoChoice {
  Bf16GemmKernel kernel;
  double measured_speedup;
};

// Why kOneDnn cannot run here, for the message of a program or environment that asks for it.
std::string NoOneDnnBf16Matmul(const std::string& who) {
  return who + ": oneDNN has no bf16 matmul on this CPU (bf16 instructions: " + Bf16Instructions() +
         "; oneDNN's bf16 kernels need AVX-512, which this CPU or ONEDNN_MAX_CPU_ISA does not allow); the "
         "float32 "
         "kernel (fp32) computes the same numbers up to the order of the float32 sums";
}

// kAuto resolved once: DDP_BF16_GEMM, else Note [bf16 GEMM kernel choice].
const AutoChoice& ResolveAuto() {
  static const AutoChoice resolved = []() -> AutoChoice {
    if (const Bf16GemmKernel pinned = Bf16GemmKernelFromEnvironment(); pinned != Bf16GemmKernel::kAuto) {
      DDP_CHECK(pinned != Bf16GemmKernel::kOneDnn || OneDnnBf16MatmulAvailable())
          << NoOneDnnBf16Matmul("DDP_BF16_GEMM=onednn") << ": unset DDP_BF16_GEMM or set it to fp32";
      return {pinned, 0.0};
    }
    if (OneDnnHasAmx()) return {Bf16GemmKernel::kOneDnn, 0.0};
    if (!OneDnnHasAvx512Bf16() || !OneDnnBf16MatmulAvailable()) return {Bf16GemmKernel::kFloat32, 0.0};
    const double speedup = MeasureOneDnnSpeedup();
    return {speedup >= kMinOneDnnSpeedup ? Bf16GemmKernel::kOneDnn : Bf16GemmKernel::kFloat32, speedup};
  }();
  return resolved;
}

void AnnounceOnce() {
  static std::once_flag once;
  std::call_once(once, [] { std::fprintf(stderr, "%s\n", Bf16GemmKernelDescription().c_str()); });
}

}  // namespace

void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a,
          int64_t lda, const BFloat16* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  DDP_CHECK(alpha == 1.0f && (beta == 0.0f || beta == 1.0f))
      << "bf16 Gemm: alpha " << alpha << " must be 1 and beta " << beta << " 0 or 1";
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (beta == 0.0f) {
      for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
    }
    return;
  }
  AnnounceOnce();
  if (ActiveBf16GemmKernel() == Bf16GemmKernel::kOneDnn) {
    OneDnnGemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, beta, c, ldc);
  } else {
    Float32Gemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, beta, c, ldc);
  }
}

void SetBf16GemmKernel(Bf16GemmKernel kernel) {
  DDP_CHECK(kernel != Bf16GemmKernel::kOneDnn || OneDnnBf16MatmulAvailable())
      << NoOneDnnBf16Matmul("SetBf16GemmKernel(kOneDnn)");
  requested_kernel.store(kernel);
}

bool OneDnnBf16MatmulAvailable() {
  static const bool available = [] {
    try {
      MakePlan(GemmKey{false, false, 16, 16, 16, 16, 16, 16, false, 1});
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return available;
}

bool Bf16GemmsOnAmx() { return ActiveBf16GemmKernel() == Bf16GemmKernel::kOneDnn && OneDnnHasAmx(); }

bool GemmOnAmxBrgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                     int64_t ldc, bool accumulate) {
  if (!Bf16GemmsOnAmx()) return false;
  thread_local std::map<GemmKey, bool> on_brgemm;  // per thread, as the plans
  const GemmKey key{trans_a, trans_b, m, n, k, lda, ldb, ldc, accumulate, GetNumThreads()};
  auto it = on_brgemm.find(key);
  if (it == on_brgemm.end()) {
    const std::string implementation = MakePrimitiveDesc(key).impl_info_str();
    it = on_brgemm.emplace(key, implementation.rfind("brg:avx512_core_amx", 0) == 0).first;
  }
  return it->second;
}

const char* Bf16Instructions() {
  if (OneDnnHasAmx()) return "amx";
  return OneDnnHasAvx512Bf16() ? "avx512_bf16" : "none";
}

const char* Bf16GemmKernelName(Bf16GemmKernel kernel) {
  DDP_CHECK(kernel != Bf16GemmKernel::kAuto) << "Bf16GemmKernelName: kAuto names no kernel";
  return kernel == Bf16GemmKernel::kOneDnn ? "onednn" : "fp32";
}

Bf16GemmKernel Bf16GemmKernelFromEnvironment() {
  constexpr std::array<Bf16GemmKernel, 3> kKernels = {Bf16GemmKernel::kAuto, Bf16GemmKernel::kOneDnn,
                                                      Bf16GemmKernel::kFloat32};
  return kKernels[EnvironmentChoice("DDP_BF16_GEMM", {"auto", "onednn", "fp32"})];
}

Bf16GemmKernel ActiveBf16GemmKernel() {
  const Bf16GemmKernel kernel = requested_kernel.load();
  return kernel == Bf16GemmKernel::kAuto ? ResolveAuto().kernel : kernel;
}

std::string Bf16GemmKernelDescription() {
  const bool amx = OneDnnHasAmx(), bf16 = OneDnnHasAvx512Bf16();
  const char* cpu = amx ? "this CPU has AMX" : bf16 ? "this CPU has AVX512_BF16 but no usable AMX"
                                                    : "this CPU has no bf16 instructions";
  const bool automatic = requested_kernel.load() == Bf16GemmKernel::kAuto;
  const Bf16GemmKernel pinned = Bf16GemmKernelFromEnvironment();
  std::string reason;  // why this kernel: the program, the environment or a measurement
  if (!automatic) {
    reason = "; set by the program";
  } else if (pinned != Bf16GemmKernel::kAuto) {
    reason = std::string("; DDP_BF16_GEMM=") + Bf16GemmKernelName(pinned);
  } else if (ResolveAuto().measured_speedup > 0) {
    char line[200];
    std::snprintf(
        line, sizeof line,
        "; measured here at %.2fx the speed of float32 GEMMs of the widened operands (%lldx%lldx%lld)",
        ResolveAuto().measured_speedup, static_cast<long long>(kCalibrationShape[0]),
        static_cast<long long>(kCalibrationShape[1]), static_cast<long long>(kCalibrationShape[2]));
    reason = line;
  }
  if (ActiveBf16GemmKernel() == Bf16GemmKernel::kOneDnn) {
    return std::string("bf16 GEMMs: oneDNN's bf16 matmul (") + cpu +
           (amx ? "; AMX tiles run bf16 several times faster than float32" : "") + reason +
           "; tensor/cpu_gemm_bf16.h, Note [bf16 GEMM kernel choice])";
  }
  return std::string("bf16 GEMMs: float32 GEMMs of the bf16-rounded operands (") + cpu + reason +
         "): the numbers of a bf16 GEMM with float32 accumulation at float32 GEMM speed, plus one widening "
         "pass over each operand; no speed-up over --precision=fp32 (tensor/cpu_gemm_bf16.h, Note [bf16 "
         "GEMM kernel choice])";
}

}  // namespace cpu
}  // namespace ddp
