// Autocast on CUDA (Note [Autocast on CUDA] in tensor/autocast.h), in bf16 and fp16: the device rounding
// equals the CPU's bit for bit; every autocast op's forward value and gradients equal the CPU autocast
// result on the same inputs within float32 summation-order tolerance, and differ from plain float32 by
// far more (the operands were rounded); parameters are cast once per scope. Skips with a printed reason
// where there is no GPU (or in builds without --config=cuda).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tensor/autocast.h"
#include "tensor/factory.h"
#include "tensor/low_precision_round.h"
#include "tensor/ops.h"
#include "tensor/random.h"
#include "testing/cuda_test.h"
#ifdef DDP_WITH_CUDA
#include "tensor/cuda/cuda_ops.h"
#endif

namespace ddp {
namespace {

#ifndef DDP_WITH_CUDA

DDP_CUDA_TESTS_NEED_A_CUDA_BUILD(AutocastCudaTest)

#else

const Device kGpu = Device::CUDA(0);

using AutocastCudaTest = CudaTest;

// Summation order is all that differs between the CPU's and the GPU's autocast: products of two 16-bit
// values are exact in float32, and both accumulate in float32 (tensor cores may truncate while adding,
// which errs ~K * 2^-23 relative at worst over K terms, far below this).
constexpr float kTolerance = 1e-4f;

Tensor Rand(const Shape& shape, uint64_t seed) {
  Generator g(seed);
  return Uniform(shape, -1.0f, 1.0f, g);
}

using Op = std::function<Tensor(const std::vector<Tensor>&)>;

// The op's output and the gradients of sum(out * c) for every input, all on the CPU.
struct Result {
  std::vector<Tensor> values;  // output, then the gradient of each input
};

// Runs `op` on copies of `inputs` on `device`, under an autocast scope of `dtype` (none when
// autocast = false); backward runs after the scope, as training does.
Result Run(const Op& op, const std::vector<Tensor>& inputs, const Tensor& c, Device device, bool autocast,
           DType dtype) {
  std::vector<Tensor> in;
  for (const Tensor& t : inputs) {
    Tensor copy = device.is_cuda() ? ToDevice(t, device) : Clone(t);
    copy.set_requires_grad(true);
    in.push_back(copy);
  }
  Tensor out;
  if (autocast) {
    AutocastScope scope(true, dtype);
    out = op(in);
  } else {
    out = op(in);
  }
  EXPECT_EQ(out.dtype(), DType::kFloat32);
  EXPECT_EQ(out.device(), device);
  Sum(Mul(out, device.is_cuda() ? ToDevice(c, device) : c)).Backward();
  Result r;
  r.values.push_back(ToDevice(out.Detach(), Device::CPU()));
  for (const Tensor& t : in) r.values.push_back(ToDevice(t.grad(), Device::CPU()));
  return r;
}

// max_i |a_i - b_i| / (1 + |a_i|)
float MaxRelativeDiff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  const std::vector<float> va = a.ToVector<float>(), vb = b.ToVector<float>();
  float worst = 0.0f;
  for (size_t i = 0; i < va.size(); ++i) {
    const float d = std::fabs(va[i] - vb[i]) / (1.0f + std::fabs(va[i]));
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
  }
  return worst;
}

const char* Name(DType dtype) { return dtype == DType::kBFloat16 ? "bf16" : "fp16"; }

// The GPU's autocast result against the CPU's (tight) and against the GPU's float32 (far apart: the
// forward output and the gradient of input 1, the weight, must differ by more than 10x the tolerance under
// bf16 and 3x under fp16, whose rounding errs 8x less; at these sizes the rounding moves the worst
// element by 5e-3..1.5e-2 (bf16) and 6e-4..2.5e-3 (fp16) relative, measured over 20 random draws).
void CheckAutocastOp(const std::string& name, const Op& op, const std::vector<Tensor>& inputs, DType dtype) {
  const std::string what = name + " " + Name(dtype);
  Tensor probe;
  {
    AutocastScope scope(false);
    probe = op(inputs);
  }
  const Tensor c = Rand(probe.shape(), 99);
  const Result cpu = Run(op, inputs, c, Device::CPU(), true, dtype);
  const Result gpu = Run(op, inputs, c, kGpu, true, dtype);
  const Result fp32 = Run(op, inputs, c, kGpu, false, dtype);
  for (size_t i = 0; i < cpu.values.size(); ++i) {
    const std::string part = i == 0 ? "forward" : "gradient of input " + std::to_string(i - 1);
    EXPECT_LE(MaxRelativeDiff(cpu.values[i], gpu.values[i]), kTolerance) << what << ": GPU vs CPU autocast, " << part;
  }
  const float apart = (dtype == DType::kBFloat16 ? 10 : 3) * kTolerance;
  EXPECT_GT(MaxRelativeDiff(fp32.values[0], gpu.values[0]), apart)
      << what << ": the forward equals float32's, so the operands were not rounded";
  EXPECT_GT(MaxRelativeDiff(fp32.values[2], gpu.values[2]), apart)
      << what << ": the weight gradient equals float32's, so the backward operands were not rounded";
}

class AutocastCudaOpsTest : public CudaTest, public ::testing::WithParamInterface<DType> {};

TEST_P(AutocastCudaOpsTest, LinearMatchesCpuAutocast) {
  CheckAutocastOp("Linear", [](const std::vector<Tensor>& v) { return Linear(v[0], v[1], v[2]); },
                  {Rand({32, 96}, 1), Rand({48, 96}, 2), Rand({48}, 3)}, GetParam());
}

TEST_P(AutocastCudaOpsTest, LinearOnATransposedInputMatchesCpuAutocast) {
  CheckAutocastOp("Linear (transposed input)",
                  [](const std::vector<Tensor>& v) { return Linear(Transpose(v[0], 0, 1), v[1], v[2]); },
                  {Rand({96, 32}, 4), Rand({48, 96}, 5), Rand({48}, 6)}, GetParam());
}

TEST_P(AutocastCudaOpsTest, MatmulMatchesCpuAutocast) {
  CheckAutocastOp("Matmul", [](const std::vector<Tensor>& v) { return Matmul(v[0], v[1]); },
                  {Rand({40, 72}, 7), Rand({72, 56}, 8)}, GetParam());
}

TEST_P(AutocastCudaOpsTest, Conv2dMatchesCpuAutocast) {
  CheckAutocastOp("Conv2d", [](const std::vector<Tensor>& v) { return Conv2d(v[0], v[1], v[2], 1, 1); },
                  {Rand({4, 6, 10, 10}, 9), Rand({8, 6, 3, 3}, 10), Rand({8}, 11)}, GetParam());
  CheckAutocastOp("Conv2d stride 2", [](const std::vector<Tensor>& v) { return Conv2d(v[0], v[1], v[2], 2, 0); },
                  {Rand({3, 5, 11, 9}, 12), Rand({7, 5, 3, 3}, 13), Rand({7}, 14)}, GetParam());
}

TEST_P(AutocastCudaOpsTest, Conv2dReluMaxPool2dMatchesCpuAutocast) {
  CheckAutocastOp("Conv2dReluMaxPool2d",
                  [](const std::vector<Tensor>& v) { return Conv2dReluMaxPool2d(v[0], v[1], v[2], 1, 1, 2, 2); },
                  {Rand({4, 6, 12, 12}, 15), Rand({8, 6, 3, 3}, 16), Rand({8}, 17)}, GetParam());
}

// A small MLP's parameter gradients through Linear, ReLU and CrossEntropy: the ops compose on the device.
TEST_P(AutocastCudaOpsTest, MlpMatchesCpuAutocast) {
  const Tensor target = FromVector(std::vector<int64_t>{0, 3, 1, 2, 3, 0, 1, 2}, {8});
  const Op mlp = [target](const std::vector<Tensor>& v) {
    const Tensor h = Relu(Linear(v[0], v[1], Tensor()));
    const Tensor logits = Linear(h, v[2], Tensor());
    const Tensor t = logits.device().is_cuda() ? ToDevice(target, logits.device()) : target;
    return MulScalar(CrossEntropy(logits, t), 100.0f);
  };
  CheckAutocastOp("MLP", mlp, {Rand({8, 64}, 18), Rand({32, 64}, 19), Rand({4, 32}, 20)}, GetParam());
}

INSTANTIATE_TEST_SUITE_P(BothDTypes, AutocastCudaOpsTest, ::testing::Values(DType::kBFloat16, DType::kFloat16),
                         [](const ::testing::TestParamInfo<DType>& info) { return std::string(Name(info.param)); });

// The device's rounding is the CPU's functor, bit for bit, at every rounding-relevant pattern.
TEST_F(AutocastCudaTest, DeviceRoundingEqualsTheCpuFunctorBitForBit) {
  const uint32_t lows[] = {0x0000, 0x0001, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x7fff, 0x8000, 0x8001, 0xffff};
  std::vector<float> cases;
  for (uint32_t high = 0; high < 65536; ++high) {
    for (uint32_t low : lows) cases.push_back(functors::BitsToFloat((high << 16) | low));
  }
  const Tensor host = FromVector(cases, {static_cast<int64_t>(cases.size())});
  const Tensor device = ToDevice(host, kGpu);
  for (DType dtype : {DType::kBFloat16, DType::kFloat16}) {
    const Tensor rounded = ToDevice(cuda::RoundToLowPrecision(device, dtype), Device::CPU());
    const Tensor widened = ToDevice(cuda::WidenToFloat32(cuda::RoundToLowPrecision(device, dtype)), Device::CPU());
    ASSERT_EQ(rounded.dtype(), dtype);
    const auto* bits = static_cast<const uint16_t*>(rounded.raw_data());
    const float* wide = widened.data<float>();
    for (size_t i = 0; i < cases.size(); ++i) {
      const uint16_t want =
          dtype == DType::kBFloat16 ? functors::RoundToBFloat16()(cases[i]) : functors::RoundToHalf()(cases[i]);
      ASSERT_EQ(bits[i], want) << Name(dtype) << " input bits 0x" << std::hex << functors::FloatBits(cases[i]);
      const float want_wide =
          dtype == DType::kBFloat16 ? functors::BFloat16ToFloat32()(want) : functors::HalfToFloat32()(want);
      ASSERT_EQ(functors::FloatBits(wide[i]), functors::FloatBits(want_wide)) << Name(dtype) << " widening " << i;
    }
  }
}

// A parameter is cast once per outermost scope on CUDA too; a new scope casts it again.
TEST_F(AutocastCudaTest, ParametersAreCastOncePerScope) {
  Tensor w = ToDevice(Rand({16, 24}, 21), kGpu);
  w.set_requires_grad(true);
  const Tensor x = ToDevice(Rand({4, 24}, 22), kGpu);
  const AutocastCacheCounters before = GetAutocastCacheCounters();
  {
    AutocastScope scope(true, DType::kBFloat16);
    Sum(Linear(Linear(x, w, Tensor()), Transpose(w, 0, 1), Tensor())).Backward();
  }
  AutocastCacheCounters after = GetAutocastCacheCounters();
  EXPECT_EQ(after.misses - before.misses, 1);
  EXPECT_EQ(after.hits - before.hits, 0);  // the transposed view is not the leaf: cast, not cached
  {
    AutocastScope scope(true, DType::kFloat16);
    Linear(x, w, Tensor());
    Linear(x, w, Tensor());
  }
  const AutocastCacheCounters last = GetAutocastCacheCounters();
  EXPECT_EQ(last.misses - after.misses, 1);
  EXPECT_EQ(last.hits - after.hits, 1);
}

#endif  // DDP_WITH_CUDA

}  // namespace
}  // namespace ddp
