#include "nn/clip_grad.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tensor/factory.h"

namespace ddp {
namespace {

Tensor ParamWithGrad(const std::vector<float>& grad) {
  Tensor p = Zeros({static_cast<int64_t>(grad.size())});
  p.set_requires_grad(true);
  p.set_grad(FromVector(grad, {static_cast<int64_t>(grad.size())}));
  return p;
}

// Norm over both tensors: sqrt(9 + 16 + 144) = 13; clipped to 6.5 every gradient halves (to rounding).
TEST(ClipGradNormTest, ScalesEveryGradientByTheGlobalNorm) {
  Tensor a = ParamWithGrad({3, 4}), b = ParamWithGrad({12});
  Tensor none = Zeros({2});  // no gradient: skipped
  absl::StatusOr<double> norm = ClipGradNorm({a, b, none}, 6.5);
  ASSERT_TRUE(norm.ok());
  EXPECT_NEAR(*norm, 13.0, 1e-6);
  const float scale = static_cast<float>(6.5 / (13.0 + 1e-6));
  EXPECT_FLOAT_EQ(a.grad().ToVector<float>()[0], 3 * scale);
  EXPECT_FLOAT_EQ(a.grad().ToVector<float>()[1], 4 * scale);
  EXPECT_FLOAT_EQ(b.grad().ToVector<float>()[0], 12 * scale);
}

TEST(ClipGradNormTest, SmallNormsAreLeftAlone) {
  Tensor a = ParamWithGrad({3, 4});
  EXPECT_NEAR(ClipGradNorm({a}, 10.0).value(), 5.0, 1e-6);
  EXPECT_EQ(a.grad().ToVector<float>(), (std::vector<float>{3, 4}));
}

// A sharded optimizer sums squared norms across ranks: here the "other rank" holds 12^2.
TEST(ClipGradNormTest, SquaredNormsAreSummedAcrossShards) {
  Tensor mine = ParamWithGrad({3, 4});
  absl::StatusOr<double> norm = ClipGradNorm({mine}, 6.5, [](double local) -> absl::StatusOr<double> {
    return local + 144.0;
  });
  EXPECT_NEAR(norm.value(), 13.0, 1e-6);
  EXPECT_NEAR(mine.grad().ToVector<float>()[0], 1.5f, 1e-5);
  const absl::Status failed =
      ClipGradNorm({mine}, 1.0, [](double) -> absl::StatusOr<double> { return absl::UnavailableError("peer gone"); })
          .status();
  EXPECT_EQ(failed.message(), "ClipGradNorm: summing squared norms: peer gone");
}

}  // namespace
}  // namespace ddp
