// PowerSGD (reducer/powersgd_hook.h) against hand-made buckets at two ranks (threads over Gloo), and
// through the Reducer against plain all-reduce.
#include "reducer/powersgd_hook.h"

#include <cmath>
#include <iostream>

#include "gtest/gtest.h"
#include "reducer/reducer.h"
#include "reducer/reducer_test_util.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "tensor/random.h"
#include "testing/run_ranks.h"

namespace ddp {
namespace {

// A bucket holding parameters of `shapes` (indices 0..), filled with `values` (one tensor per shape).
GradBucket MakeBucket(const std::vector<Shape>& shapes, const std::vector<Tensor>& values, bool is_last = true) {
  int64_t total = 0;
  for (const Shape& shape : shapes) total += NumElements(shape);
  GradBucket bucket;
  bucket.buffer = Tensor::Empty({total}, DType::kFloat32);
  bucket.is_last = is_last;
  int64_t offset = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const int64_t numel = NumElements(shapes[i]);
    Tensor view = Reshape(Narrow(bucket.buffer, 0, offset, numel), shapes[i]);
    CopyInPlace(view, values[i]);
    bucket.parameters.push_back({i, "p" + std::to_string(i), shapes[i], offset, numel, view});
    offset += numel;
  }
  return bucket;
}

// Rank `rank`'s gradients for one step: random, different per rank and step, scaled by 1/world.
std::vector<Tensor> Gradients(const std::vector<Shape>& shapes, int rank, int step) {
  Generator g(100 * step + rank);
  std::vector<Tensor> out;
  for (const Shape& shape : shapes) out.push_back(MulScalar(Normal(shape, 0.0f, 1.0f, g), 0.5f));
  return out;
}

// The average over both ranks of Gradients (what a plain all-reduce of the scaled buffers gives).
std::vector<Tensor> Average(const std::vector<Shape>& shapes, int step) {
  std::vector<Tensor> a = Gradients(shapes, 0, step), b = Gradients(shapes, 1, step);
  std::vector<Tensor> out;
  for (size_t i = 0; i < shapes.size(); ++i) out.push_back(Add(a[i], b[i]));
  return out;
}

float MaxAbsDifference(const Tensor& a, const Tensor& b) {
  std::vector<float> va = a.ToVector<float>(), vb = b.ToVector<float>();
  float worst = 0;
  for (size_t i = 0; i < va.size(); ++i) worst = std::max(worst, std::abs(va[i] - vb[i]));
  return worst;
}

float Norm(const Tensor& t) { return std::sqrt(Sum(Mul(t, t)).ToVector<float>()[0]); }

std::shared_ptr<PowerSgdHook> Hook(PowerSgdOptions options) { return *PowerSgdHook::Create(options); }

// Runs `steps` iterations of the hook on one bucket per step; calls check(step, bucket) after each.
void RunSteps(ProcessGroup& group, PowerSgdHook& hook, const std::vector<Shape>& shapes, int steps,
              const std::function<void(int, const GradBucket&)>& check) {
  for (int step = 0; step < steps; ++step) {
    GradBucket bucket = MakeBucket(shapes, Gradients(shapes, group.rank(), step));
    ASSERT_TRUE(hook.RunHook(group, bucket)->Wait(group.timeout()).ok());
    check(step, bucket);
  }
}

TEST(PowerSgdTest, BeforeStartIterItIsExactlyAPlainAllReduce) {
  const std::vector<Shape> shapes = {{16, 12}, {12}, {5, 4, 3}};
  RunRanks(2, [&](int rank, ProcessGroup& group) {
    PowerSgdOptions options;
    options.start_iter = 3;
    auto hook = Hook(options);
    RunSteps(group, *hook, shapes, 3, [&](int step, const GradBucket& bucket) {
      GradBucket plain = MakeBucket(shapes, Gradients(shapes, rank, step));
      ASSERT_TRUE(group.AllReduce(plain.buffer)->Wait(group.timeout()).ok());
      EXPECT_EQ(bucket.buffer.ToVector<float>(), plain.buffer.ToVector<float>()) << "step " << step;
      EXPECT_EQ(bucket.bytes_sent, static_cast<int64_t>(bucket.buffer.nbytes()));
    });
    EXPECT_EQ(hook->iteration(), 3);
  });
}

TEST(PowerSgdTest, FullRankApproximationIsExact) {
  // r >= min(n, m) for every matrix; min_compression_rate 0 compresses them all anyway.
  const std::vector<Shape> shapes = {{6, 4}, {3, 10}, {4, 2, 2}, {7}};
  RunRanks(2, [&](int, ProcessGroup& group) {
    PowerSgdOptions options;
    options.start_iter = 2;
    options.matrix_approximation_rank = 4;
    options.min_compression_rate = 0;
    auto hook = Hook(options);
    RunSteps(group, *hook, shapes, 5, [&](int step, const GradBucket& bucket) {
      const std::vector<Tensor> want = Average(shapes, step);
      for (size_t i = 0; i < shapes.size(); ++i) {
        EXPECT_LE(MaxAbsDifference(bucket.parameters[i].view, want[i]), 2e-5f) << "step " << step << " p" << i;
      }
      if (step >= 2) {
        // P: 6*4 + 3*3 + 4*4 floats, Q: 4*4 + 10*3 + 4*4, plus the vector's 7.
        EXPECT_EQ(bucket.bytes_sent, 4 * (7 + 24 + 9 + 16 + 16 + 30 + 16));
      }
    });
  });
}

TEST(PowerSgdTest, VectorsAndIncompressibleMatricesAreAllReducedPlainly) {
  // Rank 1: a 4x3 matrix would send (4+3)*1*2 = 14 >= 12 floats, so it stays exact; 32x32 compresses.
  const std::vector<Shape> shapes = {{4, 3}, {9}, {32, 32}};
  EXPECT_FALSE(PowerSgdCompresses(4, 3, 1, 2.0));
  EXPECT_TRUE(PowerSgdCompresses(32, 32, 1, 2.0));
  RunRanks(2, [&](int, ProcessGroup& group) {
    PowerSgdOptions options;
    options.start_iter = 2;
    auto hook = Hook(options);
    RunSteps(group, *hook, shapes, 4, [&](int step, const GradBucket& bucket) {
      if (step < 2) return;
      const std::vector<Tensor> want = Average(shapes, step);
      EXPECT_LE(MaxAbsDifference(bucket.parameters[0].view, want[0]), 1e-6f);
      EXPECT_LE(MaxAbsDifference(bucket.parameters[1].view, want[1]), 1e-6f);
      EXPECT_GT(MaxAbsDifference(bucket.parameters[2].view, want[2]), 1e-2f);  // rank 1 of a random 32x32
      EXPECT_EQ(bucket.bytes_sent, 4 * (12 + 9 + 32 + 32));
    });
  });
}

TEST(PowerSgdTest, ErrorFeedbackKeepsTheAccumulatedErrorBounded) {
  // The same gradient every step. With error feedback sum_t (applied_t - true_t) = -(the errors' sum at the
  // last step): bounded. Without it the rank-1 approximation drops the same part every step and the sum
  // grows linearly.
  const std::vector<Shape> shapes = {{24, 16}};
  constexpr int kSteps = 80;
  float drift[2][2] = {};  // [feedback][at step 40, at step 80]
  const Tensor want = Average(shapes, 0)[0];
  const float gradient_norm = Norm(want);
  for (bool feedback : {true, false}) {
    RunRanks(2, [&](int rank, ProcessGroup& group) {
      PowerSgdOptions options;
      options.start_iter = 2;
      options.use_error_feedback = feedback;
      auto hook = Hook(options);
      Tensor sum = Tensor::Empty({24, 16});
      FillInPlace(sum, 0.0f);
      const std::vector<Tensor> local = Gradients(shapes, rank, 0);
      for (int step = 1; step <= kSteps; ++step) {
        GradBucket bucket = MakeBucket(shapes, local);
        ASSERT_TRUE(hook->RunHook(group, bucket)->Wait(group.timeout()).ok());
        AddInPlace(sum, Sub(bucket.parameters[0].view, want));
        if (rank == 0 && step % 40 == 0) drift[feedback][step / 40 - 1] = Norm(sum);
      }
    });
  }
  EXPECT_GT(drift[false][1], 1.8f * drift[false][0]) << "without feedback the drift grows linearly";
  EXPECT_GT(drift[false][1], 30 * gradient_norm);
  EXPECT_LT(drift[true][1], 1.1f * drift[true][0] + 0.1f * gradient_norm) << "with feedback it stays bounded";
  EXPECT_LT(drift[true][1], 0.25f * drift[false][1]);
  std::cout << "drift/|g| with feedback " << drift[true][0] / gradient_norm << " -> " << drift[true][1] / gradient_norm
            << ", without " << drift[false][0] / gradient_norm << " -> " << drift[false][1] / gradient_norm << "\n";
}

TEST(PowerSgdTest, ThroughTheReducerFullRankMatchesPlainAllReduceAcrossTheRebuild) {
  RunRanks(2, [&](int rank, ProcessGroup& group) {
    TinyModel model(9), reference(9);
    ReducerOptions options;
    options.caps.bucket_cap_bytes = 160;
    options.caps.first_bucket_cap_bytes = 160;
    Reducer plain(reference.params, reference.names, &group, options);
    PowerSgdOptions powersgd;
    powersgd.start_iter = 2;
    powersgd.matrix_approximation_rank = 8;
    powersgd.min_compression_rate = 0;
    auto hook = Hook(powersgd);
    options.comm_hook = hook;
    Reducer reducer(model.params, model.names, &group, options);
    for (int it = 0; it < 5; ++it) {
      const Batch shard = Shard(GlobalBatch(it, 8), rank, 4);
      ASSERT_TRUE(RunIteration(reducer, model, shard).ok());
      ASSERT_TRUE(RunIteration(plain, reference, shard).ok());
      for (size_t i = 0; i < model.params.size(); ++i) {
        EXPECT_LE(MaxAbsDifference(model.params[i].grad(), reference.params[i].grad()), 1e-5f)
            << "iteration " << it << " " << model.names[i];
      }
      model.ZeroGrad();
      reference.ZeroGrad();
    }
    EXPECT_TRUE(reducer.buckets_rebuilt());
    EXPECT_EQ(hook->iteration(), 5);
    EXPECT_NE(hook->name().find("rank=8"), std::string::npos);
  });
}

TEST(PowerSgdTest, OrthogonalizedColumnsAreOrthonormal) {
  Generator g(3);
  const Tensor p = OrthogonalizeColumns(Normal({9, 4}, 0.0f, 1.0f, g));
  const Tensor gram = Matmul(Contiguous(Transpose(p, 0, 1)), p);
  std::vector<float> values = gram.ToVector<float>();
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) EXPECT_NEAR(values[i * 4 + j], i == j ? 1.0f : 0.0f, 1e-5f);
  }
}

TEST(PowerSgdTest, CreateRejectsBadSettings) {
  PowerSgdOptions options;
  options.start_iter = 1;
  EXPECT_FALSE(PowerSgdHook::Create(options).ok());
  options.start_iter = 2;
  options.matrix_approximation_rank = 0;
  EXPECT_FALSE(PowerSgdHook::Create(options).ok());
}

}  // namespace
}  // namespace ddp
