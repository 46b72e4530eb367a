// DataParallel: option resolution, placement checks, and scatter / replicate / parallel apply / gather.
// The autograd side is in data_parallel_replicate.cc (Note [DataParallel autograd]).
#include "dp/data_parallel.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/usable_cpus.h"
#include "dp/data_parallel_replicate.h"
#include "tensor/autograd.h"
#include "tensor/ops.h"
#include "tensor/threads.h"

#ifdef DDP_WITH_CUDA
#include "tensor/cuda/context.h"
#include "tensor/cuda/cuda_check.h"
#endif

namespace ddp {
namespace {

// `t`'s values on `device` without history (the same memory when already there).
Tensor PlaceOn(const Tensor& t, Device device) {
  NoGradGuard no_grad;
  return t.device() == device ? t.Detach() : ToDevice(t.Detach(), device);
}

// The CUDA seams: device count and the properties the balance check compares. Without --config=cuda
// there are no CUDA devices and Create reports CUDA device_ids as a FailedPrecondition.
int CudaDeviceCount() {
#ifdef DDP_WITH_CUDA
  return cuda::CudaDeviceCount();
#else
  return 0;
#endif
}

absl::StatusOr<std::vector<DeviceCapacity>> QueryCudaCapacities(const std::vector<int>& device_ids) {
#ifdef DDP_WITH_CUDA
  std::vector<DeviceCapacity> capacities;
  for (int id : device_ids) {
    cudaDeviceProp props;
    DDP_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&props, id));
    capacities.push_back({id, static_cast<int64_t>(props.totalGlobalMem), props.multiProcessorCount});
  }
  return capacities;
#else
  return absl::FailedPreconditionError(
      absl::StrCat("DataParallel over CUDA devices [", absl::StrJoin(device_ids, ", "),
                   "]: this binary was built without CUDA (--config=cuda); use CPU workers "
                   "(DataParallelOptions::device_type = kCPU)"));
#endif
}

// Fills the defaults (every device, output on device_ids[0], kernel threads) and validates the options.
absl::Status ResolveOptions(DataParallelOptions& options) {
  const bool cpu = options.device_type == DeviceType::kCPU;
  if (options.device_ids.empty()) {
    const int count = cpu ? UsableCpus() : CudaDeviceCount();
    if (count == 0) return absl::FailedPreconditionError("DataParallel: no CUDA devices to run on");
    for (int i = 0; i < count; ++i) options.device_ids.push_back(i);
  }
  std::set<int> seen;
  for (int id : options.device_ids) {
    if (id < 0 || !seen.insert(id).second) {
      return absl::InvalidArgumentError(absl::StrCat("DataParallel: device_ids must be distinct and >= 0, got [",
                                                     absl::StrJoin(options.device_ids, ", "), "]"));
    }
  }
  if (options.output_device == -1) options.output_device = options.device_ids[0];
  if (options.output_device < 0 || (cpu && seen.count(options.output_device) == 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("DataParallel: output_device ", options.output_device, " must be -1 or ",
                     cpu ? "one of the CPU worker ids [" : "a CUDA ordinal (device_ids [",
                     absl::StrJoin(options.device_ids, ", "), cpu ? "]" : "])"));
  }
  if (options.kernel_threads_per_worker < 0) {
    return absl::InvalidArgumentError(absl::StrCat("DataParallel: kernel_threads_per_worker must be >= 0, got ",
                                                   options.kernel_threads_per_worker));
  }
  if (options.kernel_threads_per_worker == 0) {
    options.kernel_threads_per_worker =
        std::max(1, GetNumThreads() / static_cast<int>(options.device_ids.size()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckModuleOnDevice(const Module& module, Device device) {
  auto misplaced = [&device](const NamedTensors& tensors, const char* what) -> absl::Status {
    for (const auto& [name, tensor] : tensors) {
      if (tensor.device() == device) continue;
      return absl::FailedPreconditionError(absl::StrCat("the module must have its parameters and buffers on ",
                                                        device.ToString(), ", but ", what, " \"", name,
                                                        "\" is on ", tensor.device().ToString()));
    }
    return absl::OkStatus();
  };
  DDP_RETURN_IF_ERROR(misplaced(module.NamedParameters(), "parameter"));
  return misplaced(module.NamedBuffers(), "buffer");
}

absl::StatusOr<std::shared_ptr<DataParallel>> DataParallel::Create(std::shared_ptr<Module> module,
                                                                    DataParallelOptions options) {
  if (module == nullptr) return absl::InvalidArgumentError("DataParallel: the module is null");
  DDP_RETURN_IF_ERROR(ResolveOptions(options));
  const int home = options.device_ids[0];
  const Device home_device = options.device_type == DeviceType::kCPU ? Device::CPU() : Device::CUDA(home);
  if (absl::Status placed = CheckModuleOnDevice(*module, home_device); !placed.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("DataParallel (device_ids[0] = ", home, "): ", placed.message()));
  }
  if (options.device_type == DeviceType::kCUDA) {
    DDP_ASSIGN_OR_RETURN(std::vector<DeviceCapacity> capacities, QueryCudaCapacities(options.device_ids));
    if (auto warning = CheckDeviceBalance(capacities)) std::fprintf(stderr, "DataParallel: %s\n", warning->c_str());
  }
  return std::shared_ptr<DataParallel>(new DataParallel(std::move(module), std::move(options)));
}

DataParallel::DataParallel(std::shared_ptr<Module> module, DataParallelOptions options)
    : Module("DataParallel"), module_(std::move(module)), options_(std::move(options)) {
  RegisterModule("module", module_);
  if (options_.device_ids.size() > 1) {
    DeviceWorkersOptions workers;
    workers.num_workers = static_cast<int>(options_.device_ids.size());
    workers.kernel_threads = options_.kernel_threads_per_worker;
    workers_ = std::make_shared<DeviceWorkers>(workers);
  }
}

Device DataParallel::DeviceOf(int id) const {
  return options_.device_type == DeviceType::kCPU ? Device::CPU() : Device::CUDA(id);
}

absl::Status DataParallel::CheckInput(const Tensor& x) const {
  if (!x.defined()) return absl::InvalidArgumentError("DataParallel: the input is undefined");
  if (x.dim() == 0) {
    return absl::InvalidArgumentError("DataParallel: a zero-dimensional input has no batch dimension to scatter");
  }
  if (options_.dim < -x.dim() || options_.dim >= x.dim()) {
    return absl::InvalidArgumentError(absl::StrCat("DataParallel: dim ", options_.dim, " is out of range for input ",
                                                   ShapeToString(x.shape())));
  }
  if (x.size(options_.dim) == 0) {
    return absl::InvalidArgumentError(absl::StrCat("DataParallel: empty batch: input ", ShapeToString(x.shape()),
                                                   " has no samples along dim ", options_.dim));
  }
  if (options_.device_type == DeviceType::kCPU && !x.device().is_cpu()) {
    return absl::FailedPreconditionError(
        absl::StrCat("DataParallel: CPU workers need the input on cpu, it is on ", x.device().ToString()));
  }
  const Device home = DeviceOf(options_.device_ids[0]);
  if (absl::Status placed = CheckModuleOnDevice(*module_, home); !placed.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("DataParallel (device_ids[0] = ", options_.device_ids[0],
                                                      "): ", placed.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> DataParallel::TryForward(const Tensor& x) {
  DDP_RETURN_IF_ERROR(CheckInput(x));
  const int64_t dim = options_.dim < 0 ? options_.dim + x.dim() : options_.dim;
  const Device output = DeviceOf(options_.output_device);
  if (workers_ == nullptr || x.size(dim) == 1) {  // one device, or one chunk: no replica needed
    return ToDevice(module_->Forward(ToDevice(x, DeviceOf(options_.device_ids[0]))), output);
  }
  return ScatterApplyGather(x, dim);
}

absl::StatusOr<Tensor> DataParallel::ScatterApplyGather(const Tensor& x, int64_t dim) {
  const std::vector<int64_t> sizes = ScatterSizes(x.size(dim), static_cast<int>(options_.device_ids.size()));
  const bool fused = options_.parallel_backward && GradModeEnabled();
  ReplicaOptions replica_options;
  replica_options.link = fused ? ReplicaLink::kReplicaLeaf : ReplicaLink::kBroadcastNode;
  const bool leaf_inputs = fused && x.requires_grad();
  // Scatter and replicate on this thread (replication touches the original's autograd state).
  std::vector<std::shared_ptr<Module>> replicas;
  std::vector<ReplicaRun> runs(sizes.size());
  std::vector<std::function<void()>> tasks;
  int64_t offset = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    ReplicaRun& run = runs[i];
    run.device = replica_options.device = DeviceOf(options_.device_ids[i]);
    replica_options.share_buffers = i == 0;  // Note [DataParallel buffers]
    replicas.push_back(ReplicateOnDevice(*module_, replica_options));
    run.input = Narrow(fused ? x.Detach() : x, dim, offset, sizes[i]);
    offset += sizes[i];
    tasks.push_back([&run, replica = replicas.back().get(), leaf_inputs] {
      const ScopedDevice on_device(run.device);
      Tensor input = ToDevice(Contiguous(run.input), run.device);
      if (leaf_inputs) input = input.Detach().set_requires_grad(true);
      run.input = input;
      run.output = replica->Forward(input);
    });
  }
  workers_->Run(tasks);  // parallel apply: replica i on worker i
  // Gather on the output device.
  const Device output = DeviceOf(options_.output_device);
  std::vector<Tensor> outputs;
  for (const ReplicaRun& run : runs) {
    if (run.output.dim() <= dim) {
      return absl::InvalidArgumentError(absl::StrCat("DataParallel: cannot gather replica outputs of shape ",
                                                     ShapeToString(run.output.shape()), " along dim ", dim));
    }
    outputs.push_back(fused ? PlaceOn(run.output, output) : ToDevice(run.output, output));
  }
  if (!fused) return Cat(outputs, dim);  // differentiable: backward walks every replica's graph
  Tensor gathered;
  {
    NoGradGuard no_grad;
    gathered = Cat(outputs, dim);
  }
  for (size_t i = 0; i < runs.size(); ++i) runs[i].params = replicas[i]->Parameters();
  RecordParallelBackward(gathered, x, module_->Parameters(), std::move(runs), dim, workers_);
  return gathered;
}

Tensor DataParallel::Forward(const Tensor& x) {
  absl::StatusOr<Tensor> out = TryForward(x);
  DDP_CHECK(out.ok()) << out.status().message();
  return *out;
}

std::shared_ptr<Module> DataParallel::Replicate() const {
  DDP_CHECK(false) << "DataParallel cannot be replicated; replicate the wrapped module";
  return nullptr;
}

}  // namespace ddp
