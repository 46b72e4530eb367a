// The Reducer with bfloat16 buckets (ReducerOptions::reduce_dtype) against a sequential reference that
// rounds as Note [Reduce dtype rounding] (reducer/bucket_cast.h) says, ranks as threads over Gloo.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "reducer/bucket_cast.h"
#include "tensor/low_precision_round.h"
#include "reducer/reducer.h"
#include "reducer/reducer_test_util.h"
#include "tensor/ops.h"
#include "testing/run_ranks.h"

namespace ddp {
namespace {

float RoundToBFloat16(float x) { return BFloat16ToFloat(FloatToBFloat16(x)); }

// Rank r's own (unreduced) gradients of iteration 0 on its shard.
std::vector<std::vector<float>> LocalGradients(int rank, int64_t per_rank, int world) {
  TinyModel model(7);
  const Batch shard = Shard(GlobalBatch(0, world * per_rank), rank, per_rank);
  model.Loss(shard.x, shard.y, /*use_extra=*/true).Backward();
  std::vector<std::vector<float>> grads;
  for (const Tensor& p : model.params) grads.push_back(p.grad().ToVector<float>());
  return grads;
}

// Counts the bytes the hooks sent per iteration.
class BytesSent : public ReducerObserver {
 public:
  void OnBucketDone(const BucketDoneEvent& event) override { bytes += event.bytes_sent; }
  int64_t bytes = 0;
};

// Two ranks: the averaged gradient is, element for element and bit for bit,
// bf16(bf16(g_0 / 2) + bf16(g_1 / 2)) widened to float32 (one reduction step), and differs from the float32
// average (the rounding is real); the bytes on the wire are half the float32 bytes.
TEST(ReduceDtypeTest, TwoRanksEqualSequentialBFloat16Reference) {
  constexpr int kWorld = 2;
  constexpr int64_t kPerRank = 5;
  const std::vector<std::vector<float>> g0 = LocalGradients(0, kPerRank, kWorld);
  const std::vector<std::vector<float>> g1 = LocalGradients(1, kPerRank, kWorld);
  for (const size_t cap : {size_t{0}, size_t{1} << 20}) {
    RunRanks(kWorld, [&](int rank, ProcessGroup& group) {
      TinyModel model(7);
      ReducerOptions options;
      options.reduce_dtype = DType::kBFloat16;
      options.caps.first_bucket_cap_bytes = options.caps.bucket_cap_bytes = cap;
      Reducer reducer(model.params, model.names, &group, options);
      BytesSent sent;
      reducer.AddObserver(&sent);
      ASSERT_TRUE(RunIteration(reducer, model, Shard(GlobalBatch(0, kWorld * kPerRank), rank, kPerRank)).ok())
          << reducer.status();
      int64_t elements = 0, differs_from_float32 = 0;
      for (size_t i = 0; i < model.params.size(); ++i) {
        ASSERT_EQ(model.params[i].grad().dtype(), DType::kFloat32) << model.names[i];
        const std::vector<float> got = model.params[i].grad().ToVector<float>();
        for (size_t j = 0; j < got.size(); ++j) {
          const float a = RoundToBFloat16(g0[i][j] * 0.5f), b = RoundToBFloat16(g1[i][j] * 0.5f);
          const float expected = RoundToBFloat16(a + b);
          EXPECT_EQ(std::memcmp(&got[j], &expected, sizeof(float)), 0)
              << model.names[i] << "[" << j << "] rank " << rank << " cap " << cap << ": " << got[j] << " vs "
              << expected;
          differs_from_float32 += got[j] != (g0[i][j] + g1[i][j]) * 0.5f;
          ++elements;
        }
      }
      EXPECT_GT(differs_from_float32, elements / 4) << "bfloat16 reduction should round most gradients";
      EXPECT_EQ(sent.bytes, elements * 2) << "bfloat16 buckets: two bytes per gradient element";
    });
  }
}

// Three ranks: Gloo's ring fixes the summation order per chunk, so the reference is a bound: each of the
// three roundings into the bucket and the two summation steps errs by at most 2^-8 of its value.
TEST(ReduceDtypeTest, ThreeRanksWithinTheRoundingBound) {
  constexpr int kWorld = 3;
  constexpr int64_t kPerRank = 4;
  std::vector<std::vector<std::vector<float>>> local;
  for (int r = 0; r < kWorld; ++r) local.push_back(LocalGradients(r, kPerRank, kWorld));
  RunRanks(kWorld, [&](int rank, ProcessGroup& group) {
    TinyModel model(7);
    ReducerOptions options;
    options.reduce_dtype = DType::kBFloat16;
    Reducer reducer(model.params, model.names, &group, options);
    ASSERT_TRUE(RunIteration(reducer, model, Shard(GlobalBatch(0, kWorld * kPerRank), rank, kPerRank)).ok());
    for (size_t i = 0; i < model.params.size(); ++i) {
      const std::vector<float> got = model.params[i].grad().ToVector<float>();
      for (size_t j = 0; j < got.size(); ++j) {
        double exact = 0, magnitude = 0;
        for (int r = 0; r < kWorld; ++r) {
          exact += local[r][i][j] / 3.0;
          magnitude += std::abs(local[r][i][j] / 3.0);
        }
        EXPECT_LE(std::abs(got[j] - exact), 3 * std::ldexp(1.0, -8) * magnitude + 1e-30)
            << model.names[i] << "[" << j << "] rank " << rank;
      }
    }
  });
}

// One rank still rounds (Note [World size 1]): the gradient becomes bf16(g), as each rank's share does.
TEST(ReduceDtypeTest, OneRankRoundsItsGradient) {
  const std::vector<std::vector<float>> g = LocalGradients(0, 6, 1);
  RunRanks(1, [&](int, ProcessGroup& group) {
    TinyModel model(7);
    ReducerOptions options;
    options.reduce_dtype = DType::kBFloat16;
    Reducer reducer(model.params, model.names, &group, options);
    ASSERT_TRUE(RunIteration(reducer, model, Shard(GlobalBatch(0, 6), 0, 6)).ok());
    for (size_t i = 0; i < model.params.size(); ++i) {
      const std::vector<float> got = model.params[i].grad().ToVector<float>();
      for (size_t j = 0; j < got.size(); ++j) EXPECT_EQ(got[j], RoundToBFloat16(g[i][j])) << model.names[i];
    }
  });
}

TEST(BucketCastTest, RoundsTheScaledValueOnceAndKeepsSpecialValues) {
  // (1 + 2^-8) / 2 lies halfway between two bfloat16 values: ties go to even. The rest: an ordinary value,
  // infinities and NaN (kept), a float32 subnormal (kept as bfloat16 subnormal or zero, as FloatToBFloat16).
  const std::vector<float> values = {1.0f + std::ldexp(1.0f, -8), 3.0f, INFINITY, -INFINITY, NAN, 1e-40f, 0.0f};
  Tensor grad = FromVector(values, {static_cast<int64_t>(values.size())});
  Tensor slot = Tensor::Empty({static_cast<int64_t>(values.size())}, DType::kBFloat16);
  CastScaledIntoSlot(slot, grad, 0.5f);
  const std::vector<float> got = ToDType(slot, DType::kFloat32).ToVector<float>();
  for (size_t i = 0; i < values.size(); ++i) {
    const float expected = RoundToBFloat16(values[i] * 0.5f);
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(got[i])) << i;
    } else {
      EXPECT_EQ(got[i], expected) << i;
    }
  }
  ZeroSlot(slot);
  for (float v : ToDType(slot, DType::kFloat32).ToVector<float>()) EXPECT_EQ(v, 0.0f);
  EXPECT_FALSE(CheckReduceDtype(DType::kFloat16).ok());
  EXPECT_TRUE(CheckReduceDtype(DType::kBFloat16).ok());
}

// The CPU cast into a bfloat16 slot is, bit for bit, the __host__ __device__ functor the CUDA cast runs
// (functors::RoundScaledToBFloat16), at every rounding-relevant pattern (below, at and above each tie;
// NaN payloads of both signs; infinities; subnormals; overflow to inf) and the scales of world sizes 1,
// 2, 3 and 8, so CPU and CUDA buckets hold the same bits (reducer/reduce_dtype_cuda_test checks the GPU).
TEST(BucketCastTest, CpuCastIsTheDeviceFunctorBitForBit) {
  const uint32_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff};
  std::vector<float> values;
  for (uint32_t high = 0; high < 65536; ++high) {
    for (uint32_t low : lows) values.push_back(functors::BitsToFloat((high << 16) | low));
  }
  const int64_t n = static_cast<int64_t>(values.size());
  const Tensor grad = FromVector(values, {n});
  for (const float scale : {1.0f, 0.5f, 1.0f / 3.0f, 0.125f}) {
    Tensor slot = Tensor::Empty({n}, DType::kBFloat16);
    CastScaledIntoSlot(slot, grad, scale);
    const auto* bits = static_cast<const uint16_t*>(slot.raw_data());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(bits[i], functors::RoundScaledToBFloat16{scale}(values[i]))
          << "scale " << scale << " input bits 0x" << std::hex << functors::FloatBits(values[i]);
    }
  }
}

// A float32 .grad cannot view a bfloat16 bucket: the Reducer refuses the combination by name, whatever
// the parameters' device.
TEST(ReduceDtypeDeathTest, RefusesGradientAsBucketView) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        MemoryStore store;
        auto group = ProcessGroupGloo::Create(store, 0, 1);
        DDP_CHECK(group.ok()) << group.status();
        TinyModel model(7);
        ReducerOptions options;
        options.reduce_dtype = DType::kBFloat16;
        options.gradient_as_bucket_view = true;
        Reducer reducer(model.params, model.names, group->get(), options);
      },
      "reduce dtype bfloat16 cannot be combined with gradient_as_bucket_view");
}

}  // namespace
}  // namespace ddp
