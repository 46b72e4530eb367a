// GPU benchmark (--config=cuda; run by tools/gpu_check.sh on the GPU machine). Prints one line per
// figure, "name value unit", for BENCHMARKS.md next to bench/pytorch_gpu_reference.py's numbers:
//   train/<model>/b<batch>   single-GPU training throughput (samples/s), SGD momentum 0.9, synthetic data
//   train/<model>/b<batch>/ddp_forced   the same under DDP over NCCL at world size 1 with every bucket
//                             forced through NCCL (ReducerAblations::reduce_at_world_size_1): DDP's own cost
//   sgemm/<n>                 cuBLAS SGEMM TFLOP/s through the engine's Gemm (DDP_CUDA_TF32=1: TF32)
//   bandwidth/mulscalar       GB/s of a memory-bound element-wise kernel (read + write)
//   allreduce/<bytes>         NCCL all-reduce at world size 1 (path overhead), microseconds
//   train_bf16/<model>/b<batch>   with --only=bf16: the training step of train/<model>/b<batch> with its
//                             forward and loss under bf16 autocast (as train --precision=bf16)
//   gemm_bf16/<n>             with --only=bf16: TFLOP/s of the engine's bf16 GEMM (cublasGemmEx, bf16
//                             operands, float32 accumulation and output; tensor cores)
// Usage: gpu_bench [--only=train|sgemm|bandwidth|allreduce|bf16] (no flag: all but bf16)
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#ifdef DDP_WITH_CUDA
#include <cuda_runtime_api.h>

#include "store/memory_store.h"
#include "comm/nccl/process_group_nccl.h"
#include "ddp/distributed_data_parallel.h"
#include "nn/models.h"
#include "nn/sgd.h"
#include "tensor/autocast.h"
#include "tensor/cuda/allocator.h"
#include "tensor/cuda/context.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_ops.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

const Device kGpu = Device::CUDA(0);

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void Sync() { DDP_CUDA_CHECK(cudaDeviceSynchronize()); }

// Seconds per call of `run` on the GPU: 3 untimed calls, then the mean of 20, synchronised around them.
template <typename Run>
double SecondsPerRun(const Run& run) {
  for (int i = 0; i < 3; ++i) run();
  Sync();
  const int reps = 20;
  const double start = Now();
  for (int i = 0; i < reps; ++i) run();
  Sync();
  return (Now() - start) / reps;
}

// `group` non-null: the model trains under DDP over it, every bucket forced through the group. `bf16`:
// forward and loss under bf16 autocast.
void Train(const std::string& model_name, int64_t batch, ProcessGroup* group = nullptr, bool bf16 = false) {
  Generator gen(1);
  auto model = MakeModel(model_name, gen).value();
  for (const Tensor& p : model->Parameters()) cuda::MoveToDeviceInPlace(p, kGpu);
  for (const Tensor& b : model->Buffers()) cuda::MoveToDeviceInPlace(b, kGpu);
  std::shared_ptr<Module> net = model;
  if (group != nullptr) {
    DdpOptions ddp_options;
    ddp_options.reducer.ablations.reduce_at_world_size_1 = true;
    net = DistributedDataParallel::Create(model, group, ddp_options).value();
  }
  SgdOptions options;
  options.lr = 0.01f;
  options.momentum = 0.9f;
  Sgd sgd(model->Parameters(), options);
  Tensor x = ToDevice(Uniform({batch, 1, 28, 28}, 0.0f, 1.0f, gen), kGpu);
  std::vector<int64_t> labels(batch);
  for (int64_t i = 0; i < batch; ++i) labels[i] = i % 10;
  Tensor y = FromVector(labels, {batch}, kGpu);
  auto step = [&] {
    sgd.ZeroGrad();
    Tensor loss;
    {
      AutocastScope autocast(bf16, DType::kBFloat16);
      loss = CrossEntropy(net->Forward(x), y);
    }
    loss.Backward();
    sgd.Step();
  };
  for (int i = 0; i < 10; ++i) step();
  Sync();
  // resnet18 steps cost ~100x the small models' ones: fewer of them keep the whole check within minutes.
  const bool large = model_name == "resnet18";
  const int steps = batch >= 512 ? (large ? 10 : 50) : (large ? 30 : 200);
  const double start = Now();
  for (int i = 0; i < steps; ++i) step();
  Sync();
  const double seconds = Now() - start;
  std::printf("train%s/%s/b%lld%s %.1f samples/s\n", bf16 ? "_bf16" : "", model_name.c_str(), static_cast<long long>(batch),
              group != nullptr ? "/ddp_forced" : "", steps * batch / seconds);
  std::printf("memory/%s/b%lld %s\n", model_name.c_str(), static_cast<long long>(batch),
              cuda::MemoryStatsToString(cuda::GetMemoryStats(0)).c_str());
}

void Sgemm(int64_t n) {
  Generator gen(2);
  Tensor a = ToDevice(Uniform({n, n}, -1.0f, 1.0f, gen), kGpu), b = ToDevice(Uniform({n, n}, -1.0f, 1.0f, gen), kGpu);
  Tensor c = Tensor::Empty({n, n}, DType::kFloat32, kGpu);
  auto run = [&] {
    cuda::Gemm(0, false, false, n, n, n, 1.0f, a.data<float>(), n, b.data<float>(), n, 0.0f, c.data<float>(), n);
  };
  const double seconds = SecondsPerRun(run);
  const char* tf32 = std::getenv("DDP_CUDA_TF32");
  std::printf("sgemm%s/%lld %.2f TFLOP/s\n", tf32 != nullptr && std::strcmp(tf32, "1") == 0 ? "_tf32" : "",
              static_cast<long long>(n), 2.0 * n * n * n / seconds / 1e12);
}

// The bf16 GEMM autocast runs (operands made once: the GEMM alone is timed).
void GemmBf16(int64_t n) {
  Generator gen(2);
  Tensor a = cuda::RoundToLowPrecision(ToDevice(Uniform({n, n}, -1.0f, 1.0f, gen), kGpu), DType::kBFloat16);
  Tensor b = cuda::RoundToLowPrecision(ToDevice(Uniform({n, n}, -1.0f, 1.0f, gen), kGpu), DType::kBFloat16);
  Tensor c = Tensor::Empty({n, n}, DType::kFloat32, kGpu);
  auto run = [&] {
    cuda::GemmLowPrecision(0, DType::kBFloat16, false, false, n, n, n, 1.0f, a.raw_data(), n, b.raw_data(), n, 0.0f,
                           c.data<float>(), n);
  };
  const double seconds = SecondsPerRun(run);
  std::printf("gemm_bf16/%lld %.2f TFLOP/s\n", static_cast<long long>(n), 2.0 * n * n * n / seconds / 1e12);
}

void Bandwidth() {
  const int64_t n = int64_t{1} << 28;  // 1 GiB of floats
  Tensor x = Ones({n}, DType::kFloat32, kGpu);
  Tensor out;
  for (int i = 0; i < 3; ++i) out = MulScalar(x, 1.5f);
  Sync();
  const int reps = 20;
  const double start = Now();
  for (int i = 0; i < reps; ++i) out = MulScalar(x, 1.5f);
  Sync();
  const double seconds = (Now() - start) / reps;
  std::printf("bandwidth/mulscalar %.1f GB/s\n", 2.0 * n * sizeof(float) / seconds / 1e9);
}

void AllReduce() {
  MemoryStore store;
  auto group = ProcessGroupNccl::Create(store, 0, 1).value();
  for (int64_t bytes = 1 << 10; bytes <= (int64_t{256} << 20); bytes *= 16) {
    Tensor t = Ones({bytes / 4}, DType::kFloat32, kGpu);
    for (int i = 0; i < 5; ++i) DDP_CHECK(group->AllReduce(t)->Wait(absl::Seconds(60)).ok());
    const int reps = 50;
    const double start = Now();
    for (int i = 0; i < reps; ++i) DDP_CHECK(group->AllReduce(t)->Wait(absl::Seconds(60)).ok());
    const double us = (Now() - start) / reps * 1e6;
    std::printf("allreduce/%lld %.1f us (%.1f GB/s algbw)\n", static_cast<long long>(bytes), us, bytes / us / 1e3);
  }
}

}  // namespace
}  // namespace ddp

int main(int argc, char** argv) {
  const absl::Status available = ddp::cuda::CudaDeviceAvailable();
  if (!available.ok()) {
    std::printf("SKIPPED: %s\n", std::string(available.message()).c_str());
    return 0;
  }
  const std::string only = argc > 1 && std::strncmp(argv[1], "--only=", 7) == 0 ? argv[1] + 7 : "";
  if (only.empty() || only == "train") {
    ddp::MemoryStore store;
    auto group = ddp::ProcessGroupNccl::Create(store, 0, 1).value();
    for (const char* model : {"mlp", "cnn", "resnet18"}) {
      for (int64_t batch : {64, 512}) {
        ddp::Train(model, batch);
        ddp::Train(model, batch, group.get());
      }
    }
  }
  if (only == "bf16") {
    for (const char* model : {"mlp", "cnn", "resnet18"}) {
      for (int64_t batch : {64, 512}) ddp::Train(model, batch, nullptr, /*bf16=*/true);
    }
    ddp::GemmBf16(8192);
  }
  if (only.empty() || only == "sgemm") ddp::Sgemm(8192);
  if (only.empty() || only == "bandwidth") ddp::Bandwidth();
  if (only.empty() || only == "allreduce") ddp::AllReduce();
  return 0;
}

#else

int main() {
  std::printf("gpu_bench needs a build with --config=cuda\n");
  return 1;
}

#endif
