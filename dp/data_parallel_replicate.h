// The autograd plumbing of DataParallel (dp/data_parallel.h): per-forward replicas whose parameters
// are differentiable views of the original's, and the node that runs the replicas' backward passes in
// parallel. See Note [DataParallel autograd] in data_parallel_replicate.cc.
#ifndef DDP_DP_DATA_PARALLEL_REPLICATE_H_
#define DDP_DP_DATA_PARALLEL_REPLICATE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "dp/data_parallel_workers.h"
#include "nn/module.h"
#include "tensor/tensor.h"

namespace ddp {

// How a replica's parameters connect to the original's in the autograd graph.
enum class ReplicaLink {
  // Each replica parameter is a non-leaf tensor, the output of a "BroadcastBackward" node whose edge
  // leads to the original parameter (PyTorch's Broadcast function). One backward pass on the caller's
  // thread walks every replica's graph; the engine sums the replicas' gradients into the original.
  kBroadcastNode,
  // Each replica parameter is a leaf of its own (requires_grad as the original). The caller records one
  // ParallelReplicaBackward node (RecordParallelBackward) that runs the replicas' graphs on their workers
  // and returns the summed gradients.
  kReplicaLeaf,
};

struct ReplicaOptions {
  Device device = Device::CPU();             // where the replica's tensors live
  bool share_buffers = false;                // true: buffers ARE the original's (replica 0); else copies
  ReplicaLink link = ReplicaLink::kReplicaLeaf;
};

// A fresh replica of `original` (original.Replicate(): same structure and mode) whose parameters hold
// the original's values on options.device: the original's own memory when it already lives there (no
// copy; CPU workers), else a copy. With kBroadcastNode and grad mode on, every parameter that requires
// grad gets the broadcast history described above. Buffers are the original's when share_buffers (so
// in-place updates, e.g. BatchNorm's running statistics, land in the original), private copies
// otherwise. Not thread-safe with respect to `original`: call on one thread (it creates the original
// leaves' gradient sinks). REQUIRES: original.Replicate() mirrors the original's parameter and buffer
// names (true for modules that follow Module's ReplicateAs rule; checked); share_buffers only when
// options.device is where the original's buffers live.
std::shared_ptr<Module> ReplicateOnDevice(const Module& original, const ReplicaOptions& options);

// Makes `device` the calling thread's current CUDA device for its lifetime (a worker running a replica on
// cuda:N); does nothing for the CPU.
class ScopedDevice {
 public:
  explicit ScopedDevice(Device device);
  ~ScopedDevice();
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  int previous_ = -1;  // the CUDA device to restore, -1 when nothing was changed
};

// One replica's part of a forward pass, for RecordParallelBackward.
struct ReplicaRun {
  Device device = Device::CPU();
  Tensor input;                // the replica's chunk: a leaf (requires grad when the batch does)
  Tensor output;               // the replica's output, with its graph (recorded on its worker)
  std::vector<Tensor> params;  // the replica's parameters (kReplicaLeaf leaves), aligned with `params`
};

// Makes `gathered` (the outputs of `runs` concatenated along `dim`, computed without history) the
// output of a ParallelReplicaBackward node with edges to `input` (the whole batch) and `params` (the
// original parameters). Its backward splits the incoming gradient like the forward split the batch,
// runs RunBackward(run.output, chunk) for every run in parallel on `workers` (run i on worker i), then
// returns the input's gradient (the chunks' gradients concatenated) and, for each parameter, the sum of
// the replicas' gradients (the backward of the broadcast). Nothing is recorded when no edge needs a
// gradient. REQUIRES: runs.size() <= workers->size(); run outputs share gathered's dtype.
void RecordParallelBackward(const Tensor& gathered, const Tensor& input, const std::vector<Tensor>& params,
                            std::vector<ReplicaRun> runs, int64_t dim, std::shared_ptr<DeviceWorkers> workers);

}  // namespace ddp

#endif  // DDP_DP_DATA_PARALLEL_REPLICATE_H_
