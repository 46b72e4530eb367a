// The channel-blocked training passes (tensor/batch_norm_blocked.h) against the whole-tensor kernels
// they stand in for (tensor/batch_norm_kernels.h, BatchNormBatchStats): statistics, outputs, bf16 copies,
// ReLU masks, backward sums and input gradients agree bit for bit (Note [BatchNorm in channel blocks]),
// over shapes of one block, many blocks with a short last one, channels larger than a block, rows that
// are not a multiple of the vector width and rows of one value per channel, on one thread and two, with
// each block size and with the measured choice between them (Note [BatchNorm block size by measurement]).
#include "tensor/batch_norm_blocked.h"

#include <gtest/gtest.h>

#include <cstring>
#include <tuple>
#include <vector>

#include "tensor/batch_norm.h"
#include "tensor/batch_norm_block_size.h"
#include "tensor/batch_norm_kernels.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "tensor/threads.h"

namespace ddp {
namespace {

void ExpectSameBits(const Tensor& a, const Tensor& b, const char* what) {
  ASSERT_TRUE(a.defined() && b.defined()) << what;
  ASSERT_EQ(a.shape(), b.shape()) << what;
  const std::vector<float> va = a.ToVector<float>(), vb = b.ToVector<float>();
  EXPECT_EQ(std::memcmp(va.data(), vb.data(), va.size() * sizeof(float)), 0) << what << " differs";
}

Tensor Random(const Shape& shape, uint64_t seed, float low, float high) {
  Generator g(seed);
  return Uniform(shape, low, high, g);
}

// {shape, threads, block size}
class BatchNormBlockedTest : public ::testing::TestWithParam<std::tuple<Shape, int, BatchNormBlockSize>> {
 protected:
  void SetUp() override {
    threads_ = GetNumThreads();
    SetNumThreads(std::get<1>(GetParam()));
    SetBatchNormBlockSizeForTesting(std::get<2>(GetParam()));
  }
  void TearDown() override {
    SetNumThreads(threads_);
    SetBatchNormBlockSizeForTesting(BatchNormBlockSize::kAuto);
  }
  // Calls per check: under kAuto enough to run the measured calls and then the kept size.
  int calls() const {
    return std::get<2>(GetParam()) == BatchNormBlockSize::kAuto ? kBatchNormBlockTrialCalls + 2 : 1;
  }
  const Shape& shape() const { return std::get<0>(GetParam()); }
  int64_t channels() const { return shape()[1]; }

 private:
  int threads_ = 1;
};

TEST_P(BatchNormBlockedTest, ForwardIsTheWholeTensorKernelsBitForBit) {
  // An offset mean makes the two-pass variance differ from a one-pass one, so a wrong order shows.
  const Tensor x = Random(shape(), 1, 2.0f, 5.0f), residual = Random(shape(), 2, -1.0f, 1.0f);
  const Tensor weight = Random({channels()}, 3, 0.5f, 1.5f), bias = Random({channels()}, 4, -0.5f, 0.5f);
  const BatchNormStats expected = BatchNormBatchStats(x, 1e-5f);
  for (int call = 0; call < calls(); ++call) {
    for (const bool with_residual : {false, true}) {
      SCOPED_TRACE(with_residual ? "with a residual" : "without a residual");
      const Tensor r = with_residual ? residual : Tensor();
      const Tensor copy = Tensor::Empty(shape(), DType::kBFloat16),
                   expected_copy = Tensor::Empty(shape(), DType::kBFloat16);
      ReluMaskBits mask, expected_mask;
      const BlockedForward got =
          BlockedTrainingForward(x, 1e-5f, weight, bias, /*relu=*/true, r, copy, &mask);
      const Tensor expected_y =
          NormalizeAddRelu(x, expected.mean, expected.invstd, weight, bias, r, expected_copy, &expected_mask);
      ExpectSameBits(got.stats.mean, expected.mean, "mean");
      ExpectSameBits(got.stats.var, expected.var, "var");
      ExpectSameBits(got.stats.invstd, expected.invstd, "invstd");
      EXPECT_EQ(got.stats.count, expected.count);
      ExpectSameBits(got.y, expected_y, "y");
      // bf16 -> float32 is exact, so equal float bits are equal bf16 bits.
      ExpectSameBits(ToDType(copy, DType::kFloat32), ToDType(expected_copy, DType::kFloat32), "bf16 copy");
      EXPECT_EQ(mask.row_bytes, expected_mask.row_bytes);
      EXPECT_EQ(mask.bits, expected_mask.bits) << "ReLU mask";
    }
  }
  const BlockedForward plain = BlockedTrainingForward(x, 1e-5f, Tensor(), bias, /*relu=*/false);
  ExpectSameBits(plain.y, Normalize(x, expected.mean, expected.invstd, Tensor(), bias), "y without ReLU");
}

TEST_P(BatchNormBlockedTest, BackwardIsTheWholeTensorKernelsBitForBit) {
  const Tensor x = Random(shape(), 5, -2.0f, 3.0f), gy = Random(shape(), 6, -1.0f, 1.0f);
  const Tensor weight = Random({channels()}, 7, 0.5f, 1.5f);
  const BatchNormStats stats = BatchNormBatchStats(x, 1e-5f);
  ReluMaskBits mask;
  NormalizeAddRelu(x, stats.mean, stats.invstd, weight, Tensor(), Tensor(), Tensor(), &mask);
  const int64_t c = channels();
  {
    SCOPED_TRACE("without a ReLU mask");
    const Tensor expected_sums = Tensor::Empty({2 * c}, DType::kFloat32);
    BackwardSumsInto(gy, x, stats.mean, expected_sums);
    const Tensor sums = Tensor::Empty({2 * c}, DType::kFloat32), gx = Tensor::Empty(shape(), DType::kFloat32);
    BlockedTrainingBackward(gy, nullptr, x, stats, weight, Tensor(), sums, gx);
    ExpectSameBits(sums, expected_sums, "sums");
    ExpectSameBits(gx, InputGrad(gy, x, stats.mean, stats.invstd, weight, expected_sums, stats.count, true),
                   "gx");
  }
  const Tensor expected_sums = Tensor::Empty({2 * c}, DType::kFloat32);
  const Tensor expected_masked = Tensor::Empty(shape(), DType::kFloat32);
  ReluMaskedBackwardSumsInto(gy, mask, x, stats.mean, expected_masked, expected_sums);
  const Tensor expected_gx =
      InputGrad(expected_masked, x, stats.mean, stats.invstd, weight, expected_sums, stats.count, true);
  for (int call = 0; call < 2 * calls(); ++call) {
    const bool store_masked = call % 2 == 0;
    SCOPED_TRACE(store_masked ? "masked gradient stored" : "masked gradient recomputed");
    const Tensor masked = store_masked ? Tensor::Empty(shape(), DType::kFloat32) : Tensor();
    const Tensor sums = Tensor::Empty({2 * c}, DType::kFloat32), gx = Tensor::Empty(shape(), DType::kFloat32);
    BlockedTrainingBackward(gy, &mask, x, stats, weight, masked, sums, gx);
    ExpectSameBits(sums, expected_sums, "sums");
    ExpectSameBits(gx, expected_gx, "gx");
    if (store_masked) ExpectSameBits(masked, expected_masked, "masked gradient");
  }
}

// Channel bytes (n * inner * 4) against the 256 KiB block: [8, 700, 13] makes 416-byte channels, two blocks
// (630 channels, then 70); [2, 3, 200, 200] channels of 320 KB, one a block; [6, 5, 3, 3] one block of
// 9-float rows. One value per (row, channel) runs the channels-in-lanes passes (Note [BatchNorm over
// channels in lanes]): [16, 40] a small 2-d input; [3000, 37] and [2000, 64] large enough for two threads to
// take a block of columns each (37: a short last cache line); [40, 24, 1, 1] a 4-d input with 1x1 images.
INSTANTIATE_TEST_SUITE_P(
    Shapes, BatchNormBlockedTest,
    ::testing::Combine(::testing::Values(Shape{8, 700, 13}, Shape{2, 3, 200, 200}, Shape{6, 5, 3, 3},
                                         Shape{16, 40}, Shape{3000, 37}, Shape{2000, 64},
                                         Shape{40, 24, 1, 1}),
                       ::testing::Values(1, 2),
                       ::testing::Values(BatchNormBlockSize::kCacheSized, BatchNormBlockSize::kStreaming,
                                         BatchNormBlockSize::kAuto)));

TEST(BatchNormBlockedDeathTest, OneValuePerChannelIsRejected) {
  const Tensor x = Random({1, 4, 1, 1}, 8, -1.0f, 1.0f);
  EXPECT_DEATH(BlockedTrainingForward(x, 1e-5f, Tensor(), Tensor(), true),
               "expected more than 1 value per channel when training, got input \\[1, 4, 1, 1\\]");
}

}  // namespace
}  // namespace ddp
