// DataParallel on a CUDA device against the plain module on the same device. With device_ids {0} the
// batch is copied ("scattered") to cuda:0, the module runs there and the output is gathered on
// output_device. Two replicas on one GPU (the pieces DataParallel uses per device: ReplicateOnDevice,
// parallel apply on DeviceWorkers, RecordParallelBackward) stand in for two GPUs, which this machine class
// does not have, in float32 and under autocast. Skips with a printed reason without a GPU (or without
// --config=cuda).
#include <functional>
#include <vector>

#include "gtest/gtest.h"
#include "testing/cuda_test.h"
#ifdef DDP_WITH_CUDA
#include "dp/data_parallel.h"
#include "dp/data_parallel_replicate.h"
#include "nn/models.h"
#include "tensor/autocast.h"
#include "tensor/autograd.h"
#include "tensor/cuda/cuda_ops.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "testing/tensor_agreement.h"
#endif

namespace ddp {
namespace {

#ifndef DDP_WITH_CUDA

DDP_CUDA_TESTS_NEED_A_CUDA_BUILD(DataParallelCudaTest)

#else

const Device kGpu = Device::CUDA(0);

using DataParallelCudaTest = CudaTest;

// `name` built from seed 42 with its parameters and buffers on the GPU.
std::shared_ptr<Module> ModelOnGpu(const std::string& name) {
  Generator generator(42);
  std::shared_ptr<Module> model = MakeModel(name, generator).value();
  for (const Tensor& p : model->Parameters()) cuda::MoveToDeviceInPlace(p, kGpu);
  for (const Tensor& b : model->Buffers()) cuda::MoveToDeviceInPlace(b, kGpu);
  return model;
}

struct Batch {
  Tensor x;  // [12, 1, 28, 28] on the CPU
  Tensor y;  // [12] labels on the GPU
};

Batch MakeBatch() {
  Generator data(7);
  std::vector<int64_t> labels;
  for (int i = 0; i < 12; ++i) labels.push_back((3 * i) % 10);
  return {Uniform({12, 1, 28, 28}, 0.0f, 1.0f, data), FromVector(labels, {12}, kGpu)};
}

// Output and parameter gradients of `got` (one step of `forward`) agree with `plain` run on the GPU.
void ExpectSameStep(Module& plain, Module& got, const std::function<Tensor(const Tensor&)>& forward) {
  const Batch batch = MakeBatch();
  const Tensor want_out = plain.Forward(ToDevice(batch.x, kGpu));
  CrossEntropy(want_out, batch.y).Backward();
  const Tensor got_out = forward(batch.x);
  ASSERT_TRUE(got_out.device() == kGpu) << got_out.device().ToString();
  EXPECT_TRUE(Agree(got_out, want_out)) << "output";
  CrossEntropy(got_out, batch.y).Backward();
  const NamedTensors a = plain.NamedParameters(), b = got.NamedParameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(b[i].second.grad().defined()) << b[i].first;
    const Tensor& grad = b[i].second.grad();
    EXPECT_TRUE(grad.device() == kGpu) << b[i].first << " on " << grad.device().ToString();
    EXPECT_TRUE(Agree(b[i].second.grad(), a[i].second.grad())) << b[i].first;
  }
}

// DataParallel with device_ids {0}: a CPU batch goes to cuda:0, the output comes back on cuda:0, and
// the output and gradients equal the plain module's, for a CNN with batch norm too (training mode).
TEST_F(DataParallelCudaTest, OneDeviceEqualsThePlainModule) {
  for (const std::string name : {"mlp", "cnn", "cnn_bn"}) {
    std::shared_ptr<Module> plain = ModelOnGpu(name), wrapped = ModelOnGpu(name);
    DataParallelOptions options;
    options.device_type = DeviceType::kCUDA;
    options.device_ids = {0};
    auto dp = DataParallel::Create(wrapped, options);
    ASSERT_TRUE(dp.ok()) << dp.status();
    ExpectSameStep(*plain, *wrapped, [&](const Tensor& x) { return (*dp)->Forward(x); });
  }
}

// A CPU-module DataParallel cannot claim the GPU: the module must be on cuda:device_ids[0].
TEST_F(DataParallelCudaTest, ModuleOnTheCpuIsRefusedForCudaDevices) {
  Generator generator(1);
  DataParallelOptions options;
  options.device_type = DeviceType::kCUDA;
  options.device_ids = {0};
  auto dp = DataParallel::Create(MakeModel("mlp", generator).value(), options);
  ASSERT_FALSE(dp.ok());
  EXPECT_NE(dp.status().message().find("is on cpu"), std::string::npos) << dp.status();
}

// Two replicas of `original` on cuda:0, each with half of the CPU batch `x` on its own worker thread,
// gathered on cuda:0 with a backward that runs the replicas in parallel (what DataParallel does per GPU,
// with both "GPUs" being device 0). Returns the gathered output.
Tensor TwoReplicaForward(Module& original, const Tensor& x, const std::shared_ptr<DeviceWorkers>& workers) {
  std::vector<ReplicaRun> runs(2);
  std::vector<std::shared_ptr<Module> > replicas;
  std::vector<std::function<void()> > tasks;
  for (int i = 0; i < 2; ++i) {
    ReplicaOptions replica_options;
    replica_options.device = kGpu;
    replica_options.share_buffers = i == 0;
    replicas.push_back(ReplicateOnDevice(original, replica_options));
    runs[i].device = kGpu;
    runs[i].input = Narrow(x, 0, 6 * i, 6);
    tasks.push_back([&run = runs[i], replica = replicas.back().get()] {
      const ScopedDevice on_device(run.device);
      run.input = ToDevice(Contiguous(run.input), run.device);
      run.output = replica->Forward(run.input);
    });
  }
  workers->Run(tasks);
  Tensor gathered;
  {
    NoGradGuard no_grad;
    gathered = Cat({runs[0].output.Detach(), runs[1].output.Detach()}, 0);
  }
  for (int i = 0; i < 2; ++i) runs[i].params = replicas[i]->Parameters();
  RecordParallelBackward(gathered, x, original.Parameters(), std::move(runs), 0, workers);
  return gathered;
}

std::shared_ptr<DeviceWorkers> TwoWorkers() {
  DeviceWorkersOptions worker_options;
  worker_options.num_workers = 2;
  return std::make_shared<DeviceWorkers>(worker_options);
}

// Two replicas on cuda:0 (TwoReplicaForward): the output and the summed gradients equal the plain
// module's on the whole batch.
TEST_F(DataParallelCudaTest, TwoReplicasOnOneGpuEqualThePlainModule) {
  for (const std::string name : {"mlp", "cnn"}) {
    std::shared_ptr<Module> plain = ModelOnGpu(name), original = ModelOnGpu(name);
    const std::shared_ptr<DeviceWorkers> workers = TwoWorkers();
    ExpectSameStep(*plain, *original,
                   [&](const Tensor& x) { return TwoReplicaForward(*original, x, workers); });
  }
}

// Inside an AutocastScope the workers enter the caller's scope (dp/data_parallel_workers.h), so the
// replicas' GEMMs run on the tensor cores in the scope's dtype: two replicas on cuda:0 equal the plain
// module run on each half under the same scope on this thread (outputs; gradients summed over the
// halves), and differ from float32 by more than that tolerance.
TEST_F(DataParallelCudaTest, TwoReplicasOnOneGpuRunUnderTheCallersAutocast) {
  for (DType dtype : {DType::kBFloat16, DType::kFloat16}) {
    for (const std::string name : {"mlp", "cnn"}) {
      SCOPED_TRACE(std::string(DTypeName(dtype)) + " " + name);
      std::shared_ptr<Module> plain = ModelOnGpu(name), original = ModelOnGpu(name);
      const std::shared_ptr<DeviceWorkers> workers = TwoWorkers();
      const Batch batch = MakeBatch();
      const Tensor fp32_out = plain->Forward(ToDevice(batch.x, kGpu)).Detach();
      Tensor want, got;
      {
        AutocastScope autocast(true, dtype);
        want = Cat({plain->Forward(ToDevice(Contiguous(Narrow(batch.x, 0, 0, 6)), kGpu)),
                    plain->Forward(ToDevice(Contiguous(Narrow(batch.x, 0, 6, 6)), kGpu))},
                   0);
        got = TwoReplicaForward(*original, batch.x, workers);
      }
      CrossEntropy(want, batch.y).Backward();
      CrossEntropy(got, batch.y).Backward();
      EXPECT_TRUE(Agree(got, want)) << "output";
      EXPECT_GT(NormalizedError(got, fp32_out), 1e-4) << "the workers ran in float32";
      const NamedTensors a = plain->NamedParameters(), b = original->NamedParameters();
      for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_TRUE(Agree(b[i].second.grad(), a[i].second.grad())) << b[i].first;
      }
    }
  }
}

#endif  // DDP_WITH_CUDA

}  // namespace
}  // namespace ddp
