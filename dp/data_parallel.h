// DataParallel: one process drives several devices (PyTorch's torch.nn.DataParallel). Each forward
// scatters the batch along `dim` over the devices, replicates the module onto each, runs the replicas in
// parallel threads and gathers their outputs on the output device; backward sums the replicas'
// gradients into the original parameters, so the optimizer steps the wrapped module as usual:
//
//   DataParallelOptions options;
//   options.device_ids = {0, 1};                        // two CPU workers
//   auto dp = DataParallel::Create(model, options);     // model stays the one the optimizer holds
//   Tensor loss = CrossEntropy((*dp)->Forward(x), y);   // x [n, ...] split 2 ways along dim 0
//   loss.Backward();                                    // gradients land on model's parameters
//   optimizer.Step();
//
// Devices. DataParallelOptions::device_type says what the integers in device_ids name:
//   * kCPU (the default): CPU worker slots. Each id is one worker thread with its own replica of the
//     module, using kernel_threads_per_worker OpenMP threads; all share host memory, so "the module
//     lives on device_ids[0]" means "its tensors are on the CPU", replicas read the original's parameter
//     memory without copying, and output_device only has to be one of the ids (the result is on the CPU).
//   * kCUDA: GPU ordinals (the module must be on cuda:device_ids[0]; replicas and chunks are copied to
//     each GPU, outputs to cuda:output_device), with PyTorch's load-balance warning (CheckDeviceBalance
//     in dp/data_parallel_plan.h); each worker makes its GPU current while it runs its replica. A binary
//     built without --config=cuda reports CUDA device_ids as FailedPrecondition. device_ids {0} is
//     checked against the plain module by dp/data_parallel_cuda_test (with two replicas on that one GPU
//     standing in for two devices; skipped without a GPU; not yet run on one). Several GPUs are unsafe
//     until copies between GPUs wait for the source device's kernels (docs/gpus.md, "DataParallel on CUDA").
//
// Note [DataParallel buffers]
// As in PyTorch, buffers (BatchNorm's running statistics, num_batches_tracked) are broadcast from the
// original every forward and only replica 0's updates survive: replica 0 shares the original's buffer
// memory, so its in-place updates (computed from chunk 0 alone) are the original's after the forward;
// the other replicas update private copies that are dropped. In training mode BatchNorm therefore
// normalises each chunk with that chunk's own statistics (use SyncBatchNorm with DDP for whole-batch
// statistics); in eval mode every replica uses the same running statistics and DataParallel computes
// exactly what the module computes on the whole batch. A Dropout replica starts from a copy of the
// original layer's generator, which DataParallel does not advance, so its masks repeat from step to
// step (PyTorch draws them from each device's global generator).
//
// Autograd: Note [DataParallel autograd] in dp/data_parallel_replicate.cc. The graph is recorded on
// each worker thread with the caller's grad mode (a forward under NoGradGuard records nothing).
//
// Autocast: a Forward inside an AutocastScope runs each replica inside a scope of the same dtype on its
// worker (as PyTorch's parallel_apply does), so the replicas compute what the scope's op lists say,
// chunk by chunk, exactly as the module would on each chunk on the caller's thread. Each worker casts the
// parameters once per forward (its scope is that worker's outermost: Note [Autocast] in tensor/autocast.h).
#ifndef DDP_DP_DATA_PARALLEL_H_
#define DDP_DP_DATA_PARALLEL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "dp/data_parallel_plan.h"
#include "dp/data_parallel_workers.h"
#include "nn/module.h"

namespace ddp {

struct DataParallelOptions {
  DeviceType device_type = DeviceType::kCPU;  // what device_ids name: CPU worker slots or CUDA ordinals
  std::vector<int> device_ids;                // distinct, >= 0; empty: every device (all GPUs; CPU: one
                                              // worker per usable CPU, base/usable_cpus.h: the affinity
                                              // mask, capped by a cgroup CPU quota)
  int output_device = -1;                     // where outputs are gathered; -1: device_ids[0]
  int64_t dim = 0;                            // the batch dimension (scatter and gather); may be negative
  int kernel_threads_per_worker = 0;          // CPU workers; 0: max(1, GetNumThreads() / worker count)
  bool parallel_backward = true;              // replicas' backward passes in parallel on their workers;
                                              // false: one backward on the caller's thread walks them
                                              // all (Note [DataParallel autograd])
};

// A Module whose only child is the wrapped module, registered as "module" (state-dict names are
// "module.fc1.weight", as PyTorch's DataParallel). The wrapped module is shared, not copied: its
// parameters receive the gradients and are what the optimizer updates. Thread safety: one thread calls
// Forward at a time (the workers are internal); the backward pass of its output runs on the thread
// that calls Backward.
class DataParallel : public Module {
 public:
  // Validates the options (ids distinct and >= 0, output_device among the ids for CPU workers) and the
  // placement (every parameter and buffer on device_ids[0]; the error names the first that is not and
  // where it is), then starts one worker per device. Errors: InvalidArgument for bad options,
  // FailedPrecondition for a misplaced module or CUDA devices in a build without CUDA.
  static absl::StatusOr<std::shared_ptr<DataParallel>> Create(std::shared_ptr<Module> module,
                                                               DataParallelOptions options = {});
  ~DataParallel() override = default;

  // Scatter, replicate, parallel apply, gather (see above). With a single device, or a batch that
  // yields a single chunk, runs the wrapped module directly on the caller's thread. Errors (as a
  // Status from TryForward; Forward aborts with the message): an undefined or zero-dimensional input,
  // `dim` out of range, an empty batch (size 0 along dim), an input not on the CPU for CPU workers, a
  // module moved off device_ids[0] since Create.
  Tensor Forward(const Tensor& x) override;
  absl::StatusOr<Tensor> TryForward(const Tensor& x);

  // DataParallel modules are not replicated (replicate the wrapped module). Aborts.
  std::shared_ptr<Module> Replicate() const override;

  Module& module() const { return *module_; }
  const std::vector<int>& device_ids() const { return options_.device_ids; }
  int output_device() const { return options_.output_device; }
  const DataParallelOptions& options() const { return options_; }

 private:
  DataParallel(std::shared_ptr<Module> module, DataParallelOptions options);
  // The tensor device of slot `id` (Device::CPU() for every CPU worker, cuda:id for GPUs).
  Device DeviceOf(int id) const;
  absl::Status CheckInput(const Tensor& x) const;
  absl::StatusOr<Tensor> ScatterApplyGather(const Tensor& x, int64_t dim);

  std::shared_ptr<Module> module_;
  DataParallelOptions options_;  // device_ids and output_device resolved (never empty / -1)
  std::shared_ptr<DeviceWorkers> workers_;  // shared with backward nodes that outlive a step
};

// OK when every parameter and buffer of `module` is on `device`; else FailedPrecondition naming the
// first one that is not and where it is (DataParallel's placement rule, exposed for tests and callers).
absl::Status CheckModuleOnDevice(const Module& module, Device device);

}  // namespace ddp

#endif  // DDP_DP_DATA_PARALLEL_H_
