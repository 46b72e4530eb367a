// DataParallel over CPU workers against one thread running the module: outputs, gradients,
// buffers and SGD trajectories for mlp, cnn and cnn_bn with 1-4 workers and uneven batches, in both
// backward modes, in float32 and under autocast; the errors; the worker pool.
#include "dp/data_parallel.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <cmath>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "nn/models.h"
#include "nn/sgd.h"
#include "tensor/autocast.h"
#include "tensor/autograd.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "tensor/threads.h"
#include "testing/tensor_agreement.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;

// One kernel thread on the test's own thread: the workers use one each (the default for two cores),
// and a loaded two-core machine must not be oversubscribed by spinning OpenMP teams.
const bool kOneKernelThread = (SetNumThreads(1), true);

struct Batch {
  Tensor x, y;
};
Batch MakeBatch(int step, int64_t rows) {
  Generator g(900 + step);
  std::vector<int64_t> labels(rows);
  for (auto& l : labels) l = static_cast<int64_t>(g.RandomIndex(10));
  return {Normal({rows, 1, 28, 28}, 0.0f, 1.0f, g), FromVector(labels, {rows})};
}

std::shared_ptr<Module> Model(const std::string& name) {
  Generator g(42);
  return *MakeModel(name, g);
}

std::shared_ptr<DataParallel> Wrap(std::shared_ptr<Module> model, int workers, bool parallel_backward) {
  DataParallelOptions options;
  for (int i = 0; i < workers; ++i) options.device_ids.push_back(i);
  options.parallel_backward = parallel_backward;
  auto dp = DataParallel::Create(std::move(model), options);
  EXPECT_TRUE(dp.ok()) << dp.status();
  return *dp;
}

// The reference for DataParallel in training mode with BatchNorm: what DataParallel computes by
// definition, on one thread. Each chunk of the batch (ScatterSizes) runs through its own copy of
// `model`; the output is their concatenation; after backward, `model`'s gradients are the sum of the
// copies' and its buffers are the first copy's (Note [DataParallel buffers]). Returns the output.
Tensor ChunkedReferenceStep(Module& model, const Batch& batch, int workers) {
  const std::vector<int64_t> sizes = ScatterSizes(batch.x.size(0), workers);
  std::vector<std::shared_ptr<Module>> copies;
  std::vector<Tensor> outputs;
  int64_t offset = 0;
  for (int64_t size : sizes) {
    copies.push_back(model.Replicate());
    outputs.push_back(copies.back()->Forward(Contiguous(Narrow(batch.x, 0, offset, size))));
    offset += size;
  }
  Tensor out = Cat(outputs, 0);
  CrossEntropy(out, batch.y).Backward();
  NamedTensors params = model.NamedParameters();
  for (size_t p = 0; p < params.size(); ++p) {
    Tensor sum = Clone(copies[0]->Parameters()[p].grad());
    for (size_t c = 1; c < copies.size(); ++c) AddInPlace(sum, copies[c]->Parameters()[p].grad());
    params[p].second.set_grad(sum);
  }
  NamedTensors buffers = model.NamedBuffers(), first = copies[0]->NamedBuffers();
  for (size_t b = 0; b < buffers.size(); ++b) CopyInPlace(buffers[b].second, first[b].second);
  return out.Detach();
}

// Single device: the module on the whole batch.
Tensor PlainStep(Module& model, const Batch& batch) {
  Tensor out = model.Forward(batch.x);
  CrossEntropy(out, batch.y).Backward();
  return out.Detach();
}

void ExpectSameGradientsAndState(const Module& got, const Module& want, const std::string& where) {
  NamedTensors g = got.NamedParameters(), w = want.NamedParameters();
  ASSERT_EQ(g.size(), w.size());
  for (size_t i = 0; i < g.size(); ++i) {
    EXPECT_TRUE(Agree(g[i].second.grad(), w[i].second.grad())) << where << ": grad of " << g[i].first;
  }
  NamedTensors gb = got.NamedBuffers(), wb = want.NamedBuffers();
  for (size_t i = 0; i < gb.size(); ++i) {
    if (gb[i].second.dtype() == DType::kInt64) {
      EXPECT_EQ(gb[i].second.item(), wb[i].second.item()) << where << ": " << gb[i].first;
    } else {
      EXPECT_TRUE(Agree(gb[i].second, wb[i].second)) << where << ": " << gb[i].first;
    }
  }
}

struct Case {
  std::string model;
  int workers;
  bool parallel_backward;
  bool eval;
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return absl::StrCat(c.model, "_", c.workers, "workers", c.parallel_backward ? "_parallel" : "_sequential",
                      c.eval ? "_eval" : "");
}

class DataParallelParityTest : public ::testing::TestWithParam<Case> {};

// Outputs and gradients of one step, over batch sizes that do not divide evenly (and one smaller than
// the worker count), then parameters after 3 SGD steps (momentum 0.9). mlp, cnn and cnn_bn in eval mode
// equal the module on the whole batch; cnn_bn in training mode equals ChunkedReferenceStep.
TEST_P(DataParallelParityTest, MatchesTheSingleDeviceComputation) {
  const Case c = GetParam();
  const bool chunked = c.model == "cnn_bn" && !c.eval;
  for (int64_t rows : {int64_t{3}, int64_t{10}, int64_t{13}}) {
    SCOPED_TRACE(absl::StrCat("batch ", rows));
    std::shared_ptr<Module> reference = Model(c.model), model = Model(c.model);
    if (c.eval) {
      reference->Eval();
      model->Eval();
    }
    std::shared_ptr<DataParallel> dp = Wrap(model, c.workers, c.parallel_backward);
    SgdOptions sgd;
    sgd.lr = 0.05f;
    sgd.momentum = 0.9f;
    Sgd reference_opt(reference->Parameters(), sgd), opt(model->Parameters(), sgd);
    for (int step = 0; step < 3; ++step) {
      const Batch batch = MakeBatch(step, rows);
      reference->ZeroGrad();
      model->ZeroGrad();
      Tensor want = chunked ? ChunkedReferenceStep(*reference, batch, c.workers) : PlainStep(*reference, batch);
      Tensor got = dp->Forward(batch.x);
      if (c.workers > 1 && !c.eval) {  // the backward structure of Note [DataParallel autograd]
        EXPECT_EQ(got.grad_fn()->name(), c.parallel_backward ? "ParallelReplicaBackward" : "CatBackward");
      }
      CrossEntropy(got, batch.y).Backward();
      const std::string where = absl::StrCat("step ", step);
      EXPECT_TRUE(Agree(got, want)) << where << ": output";
      ExpectSameGradientsAndState(*model, *reference, where);
      reference_opt.Step();
      opt.Step();
    }
    NamedTensors got = model->NamedParameters(), want = reference->NamedParameters();
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(Agree(got[i].second, want[i].second)) << "after 3 SGD steps: " << got[i].first;
    }
  }
}

std::vector<Case> ParityCases() {
  std::vector<Case> cases;
  for (const char* model : {"mlp", "cnn", "cnn_bn"}) {
    for (int workers = 1; workers <= 4; ++workers) {
      for (bool parallel : {true, false}) {
        cases.push_back({model, workers, parallel, false});
        if (std::string(model) == "cnn_bn") cases.push_back({model, workers, parallel, true});
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllModels, DataParallelParityTest, ::testing::ValuesIn(ParityCases()), CaseName);

// The chunked reference really differs from the whole-batch computation for cnn_bn in training mode
// (otherwise the parity test above would not show that BatchNorm uses per-replica statistics).
TEST(DataParallelTest, TrainingBatchNormUsesPerReplicaStatistics) {
  std::shared_ptr<Module> whole = Model("cnn_bn"), model = Model("cnn_bn");
  std::shared_ptr<DataParallel> dp = Wrap(model, 2, true);
  const Batch batch = MakeBatch(0, 8);
  Tensor got = dp->Forward(batch.x), want = whole->Forward(batch.x);
  EXPECT_GT(NormalizedError(got, want), 1e-3);
  // Replica 0's statistics (the first 4 samples) are the original's after the forward.
  std::shared_ptr<Module> first_half = Model("cnn_bn");
  first_half->Forward(Contiguous(Narrow(batch.x, 0, 0, 4)));
  EXPECT_TRUE(Agree(model->Child("bn1")->GetBuffer("running_mean"), first_half->Child("bn1")->GetBuffer("running_mean")));
  EXPECT_EQ(model->Child("bn2")->GetBuffer("num_batches_tracked").item(), 1);
}

TEST(DataParallelTest, InputGradientsMatch) {
  for (bool parallel : {true, false}) {
    std::shared_ptr<Module> reference = Model("mlp"), model = Model("mlp");
    std::shared_ptr<DataParallel> dp = Wrap(model, 3, parallel);
    const Batch batch = MakeBatch(1, 7);
    Tensor x1 = Clone(batch.x).set_requires_grad(true), x2 = Clone(batch.x).set_requires_grad(true);
    CrossEntropy(reference->Forward(x1), batch.y).Backward();
    CrossEntropy(dp->Forward(x2), batch.y).Backward();
    EXPECT_TRUE(Agree(x2.grad(), x1.grad())) << (parallel ? "parallel" : "sequential");
  }
}

// Inside an AutocastScope the replicas run under the caller's autocast state (as PyTorch's parallel_apply):
// DataParallel's outputs and gradients equal ChunkedReferenceStep's under the same scope on this thread
// (the module on each chunk; only the order the gradients are summed in may differ), and differ from the
// float32 computation by more than that tolerance, so the scope took effect on the workers.
TEST(DataParallelTest, ReplicasRunUnderTheCallersAutocast) {
  for (DType dtype : {DType::kBFloat16, DType::kFloat16}) {
    for (const char* name : {"mlp", "cnn"}) {
      for (int workers : {2, 3}) {
        for (bool parallel : {true, false}) {
          SCOPED_TRACE(absl::StrCat(DTypeName(dtype), " ", name, " ", workers, " workers",
                                    parallel ? " parallel" : " sequential"));
          std::shared_ptr<Module> reference = Model(name), model = Model(name), fp32 = Model(name);
          std::shared_ptr<DataParallel> dp = Wrap(model, workers, parallel);
          const Batch batch = MakeBatch(4, 13);
          const Tensor fp32_out = fp32->Forward(batch.x).Detach();
          Tensor want, got;
          {
            AutocastScope autocast(true, dtype);
            want = ChunkedReferenceStep(*reference, batch, workers);
            got = dp->Forward(batch.x);
          }
          CrossEntropy(got, batch.y).Backward();
          EXPECT_TRUE(Agree(got, want)) << "output";
          EXPECT_GT(NormalizedError(got, fp32_out), 1e-4) << "the workers ran in float32";
          ExpectSameGradientsAndState(*model, *reference, "after backward");
        }
      }
    }
  }
}

// The originals' post-accumulate hooks (what DDP's Reducer listens to) fire once per backward pass, on
// the thread that called Backward.
TEST(DataParallelTest, OriginalHooksFireOncePerBackwardOnTheCallingThread) {
  for (bool parallel : {true, false}) {
    std::shared_ptr<Module> model = Model("cnn");
    std::shared_ptr<DataParallel> dp = Wrap(model, 2, parallel);
    std::map<std::string, int> fired;
    const std::thread::id caller = std::this_thread::get_id();
    for (const auto& [name, p] : model->NamedParameters()) {
      p.RegisterPostAccumulateGradHook([&fired, name = name, caller](const Tensor&) {
        EXPECT_EQ(std::this_thread::get_id(), caller);
        ++fired[name];
      });
    }
    const Batch batch = MakeBatch(2, 6);
    CrossEntropy(dp->Forward(batch.x), batch.y).Backward();
    EXPECT_EQ(fired.size(), model->NamedParameters().size());
    for (const auto& [name, count] : fired) EXPECT_EQ(count, 1) << name;
  }
}

TEST(DataParallelTest, NoGradForwardRecordsNothingAndMatches) {
  std::shared_ptr<Module> reference = Model("cnn"), model = Model("cnn");
  std::shared_ptr<DataParallel> dp = Wrap(model, 3, true);
  const Batch batch = MakeBatch(3, 11);
  NoGradGuard no_grad;
  Tensor got = dp->Forward(batch.x);
  EXPECT_FALSE(got.requires_grad());
  EXPECT_TRUE(Agree(got, reference->Forward(batch.x)));
}

TEST(DataParallelTest, StateDictNamesCarryTheModulePrefix) {
  std::shared_ptr<DataParallel> dp = Wrap(Model("cnn_bn"), 2, true);
  NamedTensors state = dp->StateDict();
  ASSERT_FALSE(state.empty());
  EXPECT_EQ(state[0].first, "module.conv1.weight");
  EXPECT_EQ(dp->NamedChildren().size(), 1u);
}

TEST(DataParallelTest, GatherAlongAnotherDimension) {
  // A module that keeps the layout: scatter and gather along dim 1 of [2, n].
  class Scale : public Module {
   public:
    Scale() : Module("Scale") { RegisterParameter("w", Ones({1})); }
    Tensor Forward(const Tensor& x) override { return Mul(x, GetParameter("w")); }
    std::shared_ptr<Module> Replicate() const override { return ReplicateAs(*this); }
  };
  auto model = std::make_shared<Scale>();
  DataParallelOptions options;
  options.device_ids = {0, 1, 2};
  options.dim = -1;
  auto dp = DataParallel::Create(model, options);
  ASSERT_TRUE(dp.ok()) << dp.status();
  Tensor x = FromVector(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {2, 5});
  Tensor y = (*dp)->Forward(x);
  EXPECT_EQ(y.ToVector<float>(), x.ToVector<float>());
  Sum(y).Backward();
  EXPECT_FLOAT_EQ(model->GetParameter("w").grad().item(), 55.0f);
}

// ---------------------------------------------------------------------------------------------- errors

TEST(DataParallelErrorsTest, ModuleNotOnDeviceIdsZero) {
  DataParallelOptions options;
  options.device_type = DeviceType::kCUDA;
  options.device_ids = {0, 1};
  auto dp = DataParallel::Create(Model("mlp"), options);
  ASSERT_FALSE(dp.ok());
  EXPECT_EQ(dp.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(dp.status().message(), HasSubstr("device_ids[0] = 0"));
  EXPECT_THAT(dp.status().message(), HasSubstr("on cuda:0, but parameter \"fc1.weight\" is on cpu"));
}

TEST(DataParallelErrorsTest, EmptyBatch) {
  std::shared_ptr<DataParallel> dp = Wrap(Model("mlp"), 2, true);
  absl::StatusOr<Tensor> out = dp->TryForward(Zeros({0, 1, 28, 28}));
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("empty batch: input [0, 1, 28, 28] has no samples along dim 0"));
  std::shared_ptr<DataParallel> single = Wrap(Model("mlp"), 1, true);
  EXPECT_FALSE(single->TryForward(Zeros({0, 1, 28, 28})).ok());
  EXPECT_DEATH(dp->Forward(Zeros({0, 1, 28, 28})), "empty batch");
}

TEST(DataParallelErrorsTest, BadInputs) {
  std::shared_ptr<DataParallel> dp = Wrap(Model("mlp"), 2, true);
  EXPECT_THAT(dp->TryForward(Tensor()).status().message(), HasSubstr("undefined"));
  EXPECT_THAT(dp->TryForward(Zeros({})).status().message(), HasSubstr("zero-dimensional"));
  DataParallelOptions options;
  options.device_ids = {0, 1};
  options.dim = 4;
  auto far = DataParallel::Create(Model("mlp"), options);
  ASSERT_TRUE(far.ok());
  EXPECT_THAT((*far)->TryForward(Zeros({2, 1, 28, 28})).status().message(), HasSubstr("dim 4 is out of range"));
}

TEST(DataParallelErrorsTest, BadOptions) {
  DataParallelOptions duplicate;
  duplicate.device_ids = {0, 0};
  EXPECT_THAT(DataParallel::Create(Model("mlp"), duplicate).status().message(), HasSubstr("distinct"));
  DataParallelOptions output;
  output.device_ids = {0, 1};
  output.output_device = 3;
  EXPECT_THAT(DataParallel::Create(Model("mlp"), output).status().message(), HasSubstr("output_device 3"));
  EXPECT_FALSE(DataParallel::Create(nullptr, {}).ok());
}

// With no device_ids, CPU workers are as many as the CPUs the caller may use (its affinity mask, here
// narrowed to one CPU on this thread), not every CPU of the host.
TEST(DataParallelTest, DefaultCpuWorkersFollowTheAffinityMask) {
  std::vector<int> ids;
  std::thread([&ids] {  // the mask is per thread: pinning this one leaves the test's other threads alone
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu(), &one);
    ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
    auto dp = DataParallel::Create(Model("mlp"));
    ASSERT_TRUE(dp.ok()) << dp.status();
    ids = (*dp)->device_ids();
  })
      .join();
  EXPECT_EQ(ids, std::vector<int>{0});
}

TEST(DataParallelErrorsTest, CudaDeviceIdsByDefault) {
  // All GPUs by default: none without CUDA; with GPUs the CPU module is misplaced.
  DataParallelOptions options;
  options.device_type = DeviceType::kCUDA;
  EXPECT_THAT(DataParallel::Create(Model("mlp"), options).status().message(),
              ::testing::AnyOf(HasSubstr("no CUDA devices"), HasSubstr("is on cpu")));
}

// ---------------------------------------------------------------------------------------------- workers

TEST(DeviceWorkersTest, RunsEachTaskOnItsOwnThreadWithTheCallersGradModeAndKernelThreads) {
  DeviceWorkersOptions options;
  options.num_workers = 3;
  options.kernel_threads = 1;
  DeviceWorkers workers(options);
  std::vector<std::thread::id> ids(3);
  std::vector<int> grad_mode(3, -1), kernel_threads(3, 0);
  std::vector<std::function<void()>> tasks;
  for (int i = 0; i < 3; ++i) {
    tasks.push_back([&, i] {
      ids[i] = std::this_thread::get_id();
      grad_mode[i] = GradModeEnabled();
      kernel_threads[i] = GetNumThreads();
    });
  }
  workers.Run(tasks);
  EXPECT_EQ(std::set<std::thread::id>(ids.begin(), ids.end()).size(), 3u);
  EXPECT_EQ(grad_mode, (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(kernel_threads, (std::vector<int>{1, 1, 1}));
  {
    NoGradGuard no_grad;
    workers.Run(tasks);
  }
  EXPECT_EQ(grad_mode, (std::vector<int>{0, 0, 0}));
  workers.Run(tasks);  // and back on: the guard did not leak into the workers
  EXPECT_EQ(grad_mode, (std::vector<int>{1, 1, 1}));
}

TEST(DeviceWorkersTest, RunsEachTaskUnderTheCallersAutocastState) {
  DeviceWorkersOptions options;
  options.num_workers = 2;
  DeviceWorkers workers(options);
  std::vector<AutocastSettings> seen(2);
  std::vector<std::function<void()>> tasks;
  for (int i = 0; i < 2; ++i) tasks.push_back([&seen, i] { seen[i] = CurrentAutocastSettings(); });
  auto expect_seen = [&seen](bool enabled, DType dtype, const char* where) {
    for (const AutocastSettings& s : seen) {
      EXPECT_EQ(s.enabled, enabled) << where;
      if (enabled) {
        EXPECT_EQ(s.dtype, dtype) << where;
      }
    }
  };
  workers.Run(tasks);
  expect_seen(false, DType::kBFloat16, "outside any scope");
  {
    AutocastScope bf16(true, DType::kBFloat16);
    {
      AutocastScope fp16(true, DType::kFloat16);
      workers.Run(tasks);
      expect_seen(true, DType::kFloat16, "innermost scope fp16");
      AutocastScope off(false);
      workers.Run(tasks);
      expect_seen(false, DType::kBFloat16, "innermost scope disabled");
    }
    workers.Run(tasks);
    expect_seen(true, DType::kBFloat16, "bf16 scope");
  }
  workers.Run(tasks);  // the scopes did not leak into the workers
  expect_seen(false, DType::kBFloat16, "after the scopes");
}

}  // namespace
}  // namespace ddp
