#include "tensor/autograd.h"

#include <gtest/gtest.h>

#include "tensor/factory.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

TEST(AutogradTest, GradientsAccumulateAcrossBackwardPasses) {
  Tensor w = FromVector(std::vector<float>{1, 2, 3}, {3});
  w.set_requires_grad(true);
  Sum(Mul(w, w)).Backward();
  EXPECT_EQ(w.grad().ToVector<float>(), (std::vector<float>{2, 4, 6}));
  Sum(w).Backward();
  EXPECT_EQ(w.grad().ToVector<float>(), (std::vector<float>{3, 5, 7}));
}

TEST(AutogradTest, SharedInputSumsGradientsBeforeAccumulating) {
  Tensor x = FromVector(std::vector<float>{2}, {1});
  x.set_requires_grad(true);
  int fired = 0;
  x.RegisterPostAccumulateGradHook([&](const Tensor& leaf) {
    ++fired;
    EXPECT_FLOAT_EQ(leaf.grad().item(), 2 * 2 + 1);  // d(x*x + x)/dx: final value at the only firing
  });
  Sum(Add(Mul(x, x), x)).Backward();
  EXPECT_EQ(fired, 1);
}

// A gradient that reaches two nodes (Add's backward hands the same tensor to both of its inputs) is summed
// with each node's other gradient without changing the other node's copy: sums go in place only into a
// buffer no one else holds. s is made last, so its backward runs first and its shared gradient is the
// buffer the other gradients of a and b are added to. x gets (1 + 2) + (1 + 3).
TEST(AutogradTest, SharedGradientIsNotSummedInPlace) {
  Tensor x = FromVector(std::vector<float>{1, 2, 3}, {3});
  x.set_requires_grad(true);
  Tensor a = MulScalar(x, 1.0f), b = MulScalar(x, 1.0f);
  Tensor from_a = Sum(MulScalar(a, 2.0f)), from_b = Sum(MulScalar(b, 3.0f));
  Tensor s = Add(a, b);
  Add(Add(from_a, from_b), Sum(Mul(s, FromVector(std::vector<float>{1, 1, 1}, {3})))).Backward();
  EXPECT_EQ(x.grad().ToVector<float>(), (std::vector<float>{7, 7, 7}));
}

TEST(AutogradTest, HooksFireInReadyOrderThenCallbacksOnce) {
  Tensor w1 = FromVector(std::vector<float>{0.5f, -1.0f}, {1, 2});
  Tensor w2 = FromVector(std::vector<float>{2.0f}, {1, 1});
  w1.set_requires_grad(true);
  w2.set_requires_grad(true);
  std::vector<std::string> events;
  auto hook = [&](const char* name) {
    return [&events, name](const Tensor&) {
      events.push_back(name);
      if (events.size() == 1) QueueBackwardFinishedCallback([&events] { events.push_back("finished"); });
    };
  };
  w1.RegisterPostAccumulateGradHook(hook("w1"));
  w2.RegisterPostAccumulateGradHook(hook("w2"));
  Tensor x = FromVector(std::vector<float>{1, 1}, {1, 2});
  Tensor y = Matmul(Linear(x, w1, Tensor()), w2);  // w2 is used last, so its gradient is final first
  Sum(y).Backward();
  EXPECT_EQ(events, (std::vector<std::string>{"w2", "w1", "finished"}));
}

TEST(AutogradTest, InPlaceAccumulationKeepsGradAView) {
  Tensor bucket = Zeros({4});
  Tensor w = FromVector(std::vector<float>{1, 2}, {2});
  w.set_requires_grad(true);
  w.set_grad(Narrow(bucket, 0, 2, 2));
  Sum(MulScalar(w, 3.0f)).Backward();
  EXPECT_EQ(bucket.ToVector<float>(), (std::vector<float>{0, 0, 3, 3}));
  EXPECT_EQ(w.grad().storage(), bucket.storage());
}

// ZeroGradients: dropped with set_to_none (and the next backward pass gives the leaf its gradient again),
// zeroed in place and kept otherwise (a bucket view stays a view); a leaf without one is left alone.
TEST(AutogradTest, ZeroGradientsDropsOrZeroes) {
  Tensor bucket = Ones({4});
  Tensor w = FromVector(std::vector<float>{1, 2}, {2}), v = FromVector(std::vector<float>{3}, {1});
  w.set_requires_grad(true);
  v.set_requires_grad(true);
  w.set_grad(Narrow(bucket, 0, 2, 2));
  ZeroGradients({w, v}, false);
  EXPECT_EQ(bucket.ToVector<float>(), (std::vector<float>{1, 1, 0, 0}));
  EXPECT_EQ(w.grad().storage(), bucket.storage());
  EXPECT_FALSE(v.grad().defined());
  ZeroGradients({w, v}, true);
  EXPECT_FALSE(w.grad().defined());
  EXPECT_EQ(bucket.ToVector<float>(), (std::vector<float>{1, 1, 0, 0}));
  Sum(MulScalar(w, 3.0f)).Backward();
  EXPECT_EQ(w.grad().ToVector<float>(), (std::vector<float>{3, 3}));
}

// A leaf without a gradient takes the computed gradient itself only where no one else holds it: Add's
// backward hands one tensor to both of its inputs, so at least one of the two leaves gets a copy, and
// changing one leaf's gradient leaves the other's alone. The seed gradient, which the caller holds, is
// never taken either.
TEST(AutogradTest, ALeafTakesOnlyAGradientNoOneElseHolds) {
  Tensor a = FromVector(std::vector<float>{1, 2}, {2}), b = FromVector(std::vector<float>{3, 4}, {2});
  a.set_requires_grad(true);
  b.set_requires_grad(true);
  const Tensor seed = FromVector(std::vector<float>{5, 6}, {2});
  Add(a, b).Backward(seed);
  EXPECT_NE(a.grad().storage(), b.grad().storage());
  EXPECT_NE(a.grad().storage(), seed.storage());
  EXPECT_NE(b.grad().storage(), seed.storage());
  MulScalarInPlace(a.grad(), 10.0f);
  EXPECT_EQ(a.grad().ToVector<float>(), (std::vector<float>{50, 60}));
  EXPECT_EQ(b.grad().ToVector<float>(), (std::vector<float>{5, 6}));
  EXPECT_EQ(seed.ToVector<float>(), (std::vector<float>{5, 6}));
}

TEST(AutogradTest, NoGradGuardRecordsNothing) {
  Tensor w = Ones({2});
  w.set_requires_grad(true);
  {
    NoGradGuard guard;
    EXPECT_FALSE(Mul(w, w).requires_grad());
  }
  EXPECT_TRUE(Mul(w, w).requires_grad());
}

TEST(AutogradTest, GraphIsFreedAfterBackward) {
  Tensor w = Ones({2});
  w.set_requires_grad(true);
  std::weak_ptr<StorageImpl> saved;
  Tensor loss;
  {
    Tensor h = Mul(w, FromVector(std::vector<float>{3, 4}, {2}));
    saved = h.storage();
    loss = Sum(Mul(h, h));
  }
  EXPECT_FALSE(saved.expired());  // held by the graph (saved for MulBackward)
  loss.Backward();
  EXPECT_TRUE(saved.expired());
  EXPECT_DEATH(loss.Backward(), "already freed");
}

TEST(AutogradTest, CallbackOutsideBackwardAborts) {
  EXPECT_DEATH(QueueBackwardFinishedCallback([] {}), "outside a backward pass");
}

TEST(AutogradTest, BackwardWithExplicitGradient) {
  Tensor w = FromVector(std::vector<float>{1, 2}, {2});
  w.set_requires_grad(true);
  Tensor y = MulScalar(w, 2.0f);
  y.Backward(FromVector(std::vector<float>{10, 100}, {2}));
  EXPECT_EQ(w.grad().ToVector<float>(), (std::vector<float>{20, 200}));
}

}  // namespace
}  // namespace ddp
