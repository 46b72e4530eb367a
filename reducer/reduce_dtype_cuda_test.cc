// bfloat16 buckets on CUDA (Note [Reduce dtype rounding], reducer/bucket_cast.h): a CUDA slot holds the
// bits the CPU's CastScaledIntoSlot writes, for every rounding-relevant float32 pattern (ties, NaN
// payloads, infinities, subnormals, values that round past the largest bfloat16) and the scales of the
// world sizes; and a Reducer over NCCL at world size 1, every bucket through NCCL, gives CUDA parameters the
// .grad a CPU Reducer gives the same gradients, bit for bit. Skips with a printed reason where there is no
// GPU (or in builds without --config=cuda).
#include <cmath>
#include <iterator>
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "reducer/bucket_cast.h"
#include "tensor/factory.h"
#include "tensor/low_precision_round.h"
#include "tensor/ops.h"
#include "testing/cuda_test.h"
#ifdef DDP_WITH_CUDA
#include "reducer/reducer.h"
#include "tensor/random.h"
#include "testing/nccl_test.h"
#include "testing/run_ranks.h"
#endif

namespace ddp {
namespace {

#ifndef DDP_WITH_CUDA

DDP_CUDA_TESTS_NEED_A_CUDA_BUILD(ReduceDtypeCudaTest)

#else

const Device kGpu = Device::CUDA(0);

// The scales a bucket slot sees: 1/world for world sizes 1, 2, 3 and 8.
const float kScales[] = {1.0f, 0.5f, 1.0f / 3.0f, 0.125f};

// Every bfloat16-rounding-relevant float32 pattern: each upper half with lower halves below, at and above
// the tie, and the extremes (NaNs with payloads and both signs, infinities, subnormals, the largest
// float32, which rounds to inf).
std::vector<float> RoundingPatterns() {
  const uint32_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff};
  std::vector<float> values;
  for (uint32_t high = 0; high < 65536; ++high) {
    for (uint32_t low : lows) values.push_back(functors::BitsToFloat((high << 16) | low));
  }
  return values;
}

// Gradients a training step could produce, without NaN: random values over many binades, ties,
// subnormals, values past the largest bfloat16 and infinities.
std::vector<float> GradientValues(int64_t n, uint64_t seed) {
  Generator g(seed);
  const std::vector<float> mantissas = Uniform({n}, -2.0f, 2.0f, g).ToVector<float>();
  std::vector<float> values(n);
  for (int64_t i = 0; i < n; ++i) values[i] = std::ldexp(mantissas[i], static_cast<int>(i % 61) - 30);
  const float specials[] = {1.0f + std::ldexp(1.0f, -8), -(1.0f + 3 * std::ldexp(1.0f, -8)), 1e-40f, -1e-45f,
                            3.4e38f, -3.39e38f, INFINITY, -INFINITY, 0.0f, -0.0f};
  for (size_t i = 0; i < std::size(specials) && static_cast<int64_t>(i) < n; ++i) values[i * 7 % n] = specials[i];
  return values;
}

// The bits of a host copy of a bfloat16 tensor.
std::vector<uint16_t> Bits16(const Tensor& t) {
  const Tensor host = HostContiguous(t);
  const auto* p = static_cast<const uint16_t*>(host.raw_data());
  return std::vector<uint16_t>(p, p + host.numel());
}

// The bits of a host copy of a float32 tensor.
std::vector<uint32_t> Bits32(const Tensor& t) {
  std::vector<uint32_t> bits;
  for (float v : HostContiguous(t).ToVector<float>()) bits.push_back(functors::FloatBits(v));
  return bits;
}

using ReduceDtypeCudaTest = CudaTest;

// Step 1 of the Note on the GPU: the slot's bits equal the CPU's CastScaledIntoSlot, at every pattern and
// scale, for a contiguous and a transposed (strided) gradient; the neighbours of a slot inside a larger
// bucket are untouched; ZeroSlot zeroes a CUDA slot.
TEST_F(ReduceDtypeCudaTest, CastIntoACudaSlotEqualsTheCpuBitForBit) {
  const std::vector<float> values = RoundingPatterns();
  const int64_t n = static_cast<int64_t>(values.size());
  const Tensor host_grad = FromVector(values, {n / 6, 6});
  const Tensor device_grad = ToDevice(host_grad, kGpu);
  for (const bool strided : {false, true}) {
    const Tensor cpu_grad = strided ? Transpose(host_grad, 0, 1) : host_grad;
    const Tensor gpu_grad = strided ? Transpose(device_grad, 0, 1) : device_grad;
    const std::vector<float> inputs = HostContiguous(cpu_grad).ToVector<float>();  // in the slot's order
    for (const float scale : kScales) {
      Tensor cpu_slot = Tensor::Empty({n}, DType::kBFloat16);
      CastScaledIntoSlot(cpu_slot, cpu_grad, scale);
      // The slot sits between two regions of its bucket that must keep their values.
      Tensor bucket = Full({n + 64}, 1.0f, DType::kBFloat16, kGpu);
      const Tensor gpu_slot = Tensor::View(bucket.storage(), {n}, {1}, bucket.storage_offset() + 32,
                                           DType::kBFloat16);
      CastScaledIntoSlot(gpu_slot, gpu_grad, scale);
      const std::vector<uint16_t> want = Bits16(cpu_slot), got = Bits16(gpu_slot);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_EQ(got[i], want[i]) << "scale " << scale << (strided ? " strided" : "") << " input bits 0x"
                                   << std::hex << functors::FloatBits(inputs[i]);
      }
      const std::vector<float> all = ToDType(bucket, DType::kFloat32).ToVector<float>();
      for (int64_t i = 0; i < 32; ++i) {
        ASSERT_EQ(all[i], 1.0f) << "before the slot, " << i;
        ASSERT_EQ(all[n + 32 + i], 1.0f) << "after the slot, " << i;
      }
      ZeroSlot(gpu_slot);
      for (uint16_t bits : Bits16(gpu_slot)) ASSERT_EQ(bits, 0);
    }
  }
}

// The functor both devices run (reducer/reduce_dtype_test checks the CPU cast against it): the CUDA slot
// against it directly, NaN payloads included (the GPU's multiply would replace them).
TEST_F(ReduceDtypeCudaTest, CudaSlotIsTheRoundingFunctorOfTheScaledValue) {
  const std::vector<float> values = {1.0f + std::ldexp(1.0f, -8), 3.0f,        INFINITY,
                                     functors::BitsToFloat(0x7f812345u), functors::BitsToFloat(0xffc00001u),
                                     1e-40f,                      std::ldexp(1.0f, -133), 3.4e38f};
  const int64_t n = static_cast<int64_t>(values.size());
  for (const float scale : kScales) {
    Tensor slot = Tensor::Empty({n}, DType::kBFloat16, kGpu);
    CastScaledIntoSlot(slot, FromVector(values, {n}, kGpu), scale);
    const std::vector<uint16_t> got = Bits16(slot);
    for (int64_t i = 0; i < n; ++i) {
      const float x = values[i];
      const uint16_t want = functors::RoundScaledToBFloat16{scale}(x);
      EXPECT_EQ(got[i], want) << "scale " << scale << " input bits 0x" << std::hex << functors::FloatBits(x);
    }
  }
}

// Parameters p_k with loss sum_k sum(p_k * c_k): each gradient is c_k exactly on either device.
struct Problem {
  std::vector<std::vector<float>> grads;  // c_k
  std::vector<Shape> shapes;
};

Problem MakeProblem() {
  Problem problem;
  problem.shapes = {{64, 33}, {257}, {3, 5, 7}, {1}};
  uint64_t seed = 41;
  for (const Shape& shape : problem.shapes) problem.grads.push_back(GradientValues(NumElements(shape), seed++));
  return problem;
}

// One synchronised iteration of a bfloat16 Reducer over `group` on `device`, gradient divisor `divisor`,
// one bucket per parameter or all in one; returns each parameter's .grad bits.
std::vector<std::vector<uint32_t>> ReducedGradients(const Problem& problem, ProcessGroup* group, Device device,
                                                    int divisor, bool bucket_per_parameter) {
  std::vector<Tensor> params, coefficients;
  std::vector<std::string> names;
  for (size_t k = 0; k < problem.shapes.size(); ++k) {
    Tensor p = Full(problem.shapes[k], 0.5f, DType::kFloat32, device);
    p.set_requires_grad(true);
    params.push_back(p);
    names.push_back("p" + std::to_string(k));
    coefficients.push_back(FromVector(problem.grads[k], problem.shapes[k], device));
  }
  ReducerOptions options;
  options.reduce_dtype = DType::kBFloat16;
  options.ablations.reduce_at_world_size_1 = true;  // every bucket through the group's all-reduce
  if (bucket_per_parameter) options.caps.bucket_cap_bytes = options.caps.first_bucket_cap_bytes = 0;
  Reducer reducer(params, names, group, options);
  reducer.SetGradientDivisor(divisor);
  Tensor loss = Sum(Mul(params[0], coefficients[0]));
  for (size_t k = 1; k < params.size(); ++k) loss = Add(loss, Sum(Mul(params[k], coefficients[k])));
  EXPECT_TRUE(reducer.PrepareForBackward({loss}, absl::Now()).ok()) << reducer.status();
  loss.Backward();
  EXPECT_TRUE(reducer.status().ok()) << reducer.status();
  std::vector<std::vector<uint32_t>> grads;
  for (const Tensor& p : params) {
    EXPECT_EQ(p.grad().dtype(), DType::kFloat32);
    EXPECT_EQ(p.grad().device(), device);
    grads.push_back(Bits32(p.grad()));
  }
  return grads;
}

using ReduceDtypeNcclTest = NcclWorldOneTest;

// Steps 1-3 of the Note through NCCL: the CUDA parameters' .grad equals, bit for bit, the CPU Reducer's
// result on the same gradients, which is bf16(c * (1/divisor)) widened (world size 1: the sum is one
// term). Divisor 3 stands for the scale of a three-rank job.
TEST_F(ReduceDtypeNcclTest, ReducerGradientsEqualTheCpuReducerBitForBit) {
  const Problem problem = MakeProblem();
  for (const int divisor : {1, 3}) {
    for (const bool bucket_per_parameter : {false, true}) {
      const std::vector<std::vector<uint32_t>> gpu =
          ReducedGradients(problem, group_.get(), kGpu, divisor, bucket_per_parameter);
      std::vector<std::vector<uint32_t>> cpu;
      RunRanks(1, [&](int, ProcessGroup& group) {
        cpu = ReducedGradients(problem, &group, Device::CPU(), divisor, bucket_per_parameter);
      });
      ASSERT_EQ(gpu.size(), cpu.size());
      const float scale = 1.0f / static_cast<float>(divisor);
      for (size_t k = 0; k < gpu.size(); ++k) {
        ASSERT_EQ(gpu[k].size(), cpu[k].size());
        for (size_t i = 0; i < gpu[k].size(); ++i) {
          const float c = problem.grads[k][i];
          const uint32_t want =
              functors::FloatBits(functors::BFloat16ToFloat32()(functors::RoundScaledToBFloat16{scale}(c)));
          ASSERT_EQ(cpu[k][i], want) << "CPU p" << k << "[" << i << "] divisor " << divisor;
          ASSERT_EQ(gpu[k][i], cpu[k][i]) << "p" << k << "[" << i << "] = " << c << " divisor " << divisor
                                          << (bucket_per_parameter ? ", a bucket per parameter" : ", one bucket");
        }
      }
    }
  }
}

#endif  // DDP_WITH_CUDA

}  // namespace
}  // namespace ddp
