// Note [DataParallel autograd]
// PyTorch's DataParallel records Scatter, Broadcast (of the parameters) and Gather as autograd functions
// and lets its multi-threaded engine run each device's part of the backward pass on that device's
// thread. Our engine (tensor/autograd.h) walks a graph on the one thread that called Backward, so two
// ways are offered (DataParallelOptions::parallel_backward):
//   * kBroadcastNode (parallel_backward = false), PyTorch's structure: replica parameters are non-leaf
//     outputs of BroadcastBackward nodes (backward: the gradient itself, moved to the original's
//     device) with an edge to the original parameter, chunks are Narrow views of the batch and the
//     outputs are gathered by Cat. The engine sums the N gradients arriving at each original's
//     gradient sink: the backward of a broadcast is a sum. Correct and simple, but every replica's
//     backward runs on the caller's thread, one after the other: forward is parallel, backward is not.
//   * kReplicaLeaf (parallel_backward = true, the default): replica parameters and chunks are leaves of
//     the replica's own graph, recorded on its worker. The gathered output gets a single
//     ParallelReplicaBackward node with edges to the batch and to every original parameter. Its Apply
//     hands each worker its slice of the gradient, the workers run RunBackward on their replica's graph
//     concurrently (each pass is thread-local: its callbacks and grad mode belong to that worker), and
//     the node returns the sum of the replicas' parameter gradients and the concatenated chunk
//     gradients. The engine then accumulates into the originals as for any op, so post-accumulate
//     hooks and backward-finished callbacks fire on the caller's thread as usual.
// Either way the replicas alias the original's parameter memory on CPU (no copy per step) and replica 0
// aliases its buffers (Note [DataParallel buffers] in data_parallel.h).
#include "dp/data_parallel_replicate.h"

#include <string>
#include <utility>

#include "tensor/autograd.h"
#include "tensor/function_node.h"
#include "tensor/ops.h"

#ifdef DDP_WITH_CUDA
#include "tensor/cuda/cuda_check.h"
#endif

namespace ddp {
namespace {

// `t`'s values on `device`, without history: `t`'s own memory when it is already there, else a copy.
Tensor PlaceOn(const Tensor& t, Device device) {
  NoGradGuard no_grad;
  return t.device() == device ? t.Detach() : ToDevice(t.Detach(), device);
}

// Points `dst` (a replica's tensor, kept as the same handle so the replica's modules see the change)
// at `src`'s memory and geometry, with no gradient.
void Rebind(const Tensor& dst, const Tensor& src) {
  TensorImpl* impl = dst.impl();
  impl->storage = src.storage();
  impl->shape = src.shape();
  impl->strides = src.strides();
  impl->offset = src.storage_offset();
  impl->dtype = src.dtype();
  impl->grad = nullptr;
}

void CheckMirrored(const NamedTensors& original, const NamedTensors& replica, const char* what,
                   const std::string& type) {
  bool same = original.size() == replica.size();
  for (size_t i = 0; same && i < original.size(); ++i) same = original[i].first == replica[i].first;
  DDP_CHECK(same) << type << "::Replicate() does not mirror the module's " << what << "s (" << original.size()
                  << " vs " << replica.size() << "): DataParallel needs Module's ReplicateAs rule";
}

// The history of a replica parameter under kBroadcastNode (Note [DataParallel autograd]).
void LinkToOriginal(const Tensor& replica_param, const Tensor& original) {
  const Device source = original.device();
  auto node = std::make_shared<FunctionNode>("BroadcastBackward", [source](const Tensor& grad) {
    return std::vector<Tensor>{ToDevice(grad, source)};
  });
  SetHistory(replica_param, std::move(node), {&original});
}

}  // namespace

ScopedDevice::ScopedDevice(Device device) {
#ifdef DDP_WITH_CUDA
  if (!device.is_cuda()) return;
  DDP_CUDA_CHECK(cudaGetDevice(&previous_));
  DDP_CUDA_CHECK(cudaSetDevice(device.index));
#else
  DDP_CHECK(device.is_cpu()) << "a replica on " << device.ToString() << " in a build without CUDA";
#endif
}

ScopedDevice::~ScopedDevice() {
#ifdef DDP_WITH_CUDA
  if (previous_ >= 0) DDP_CUDA_CHECK(cudaSetDevice(previous_));
#endif
}

std::shared_ptr<Module> ReplicateOnDevice(const Module& original, const ReplicaOptions& options) {
  std::shared_ptr<Module> replica = original.Replicate();
  const NamedTensors params = original.NamedParameters(), replica_params = replica->NamedParameters();
  CheckMirrored(params, replica_params, "parameter", original.type_name());
  const bool link = options.link == ReplicaLink::kBroadcastNode && GradModeEnabled();
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& from = params[i].second;
    const Tensor& to = replica_params[i].second;
    Rebind(to, PlaceOn(from, options.device));
    if (link && from.requires_grad()) {
      LinkToOriginal(to, from);
    } else {
      to.set_requires_grad(from.requires_grad());
    }
  }
  const NamedTensors buffers = original.NamedBuffers(), replica_buffers = replica->NamedBuffers();
  CheckMirrored(buffers, replica_buffers, "buffer", original.type_name());
  for (size_t i = 0; i < buffers.size(); ++i) {
    const Tensor& from = buffers[i].second;
    if (options.share_buffers) {
      DDP_CHECK(from.device() == options.device)
          << "replica buffers can be shared only on the original's device (" << from.device().ToString() << ")";
      Rebind(replica_buffers[i].second, from);
    } else if (replica_buffers[i].second.device() != options.device) {
      Rebind(replica_buffers[i].second, PlaceOn(from, options.device));  // Replicate() copied on CPU
    }
  }
  return replica;
}

namespace {

// The node of kReplicaLeaf mode (Note [DataParallel autograd]). Edge 0 leads to the batch, edges 1..P
// to the original parameters.
class ParallelReplicaBackward : public Node {
 public:
  ParallelReplicaBackward(std::vector<ReplicaRun> runs, int64_t dim, Device input_device,
                          std::vector<Device> param_devices, std::shared_ptr<DeviceWorkers> workers)
      : runs_(std::move(runs)),
        dim_(dim),
        input_device_(input_device),
        param_devices_(std::move(param_devices)),
        workers_(std::move(workers)) {}

  std::vector<Tensor> Apply(const Tensor& grad_output) override {
    RunReplicaBackwards(grad_output);
    std::vector<Tensor> grads;
    grads.reserve(1 + param_devices_.size());
    grads.push_back(next_edges[0].node != nullptr ? InputGradient() : Tensor());
    for (size_t p = 0; p < param_devices_.size(); ++p) {
      grads.push_back(next_edges[1 + p].node != nullptr ? ParameterGradient(p) : Tensor());
    }
    return grads;
  }
  std::string name() const override { return "ParallelReplicaBackward"; }
  void ReleaseSavedTensors() override {
    runs_.clear();
    workers_.reset();
  }

 private:
  // Every replica's backward pass, each on its worker, with its slice of grad_output.
  void RunReplicaBackwards(const Tensor& grad_output) {
    std::vector<std::function<void()>> tasks;
    int64_t offset = 0;
    for (ReplicaRun& run : runs_) {
      const int64_t size = run.output.size(dim_);
      Tensor slice = Narrow(grad_output, dim_, offset, size);
      offset += size;
      tasks.push_back([&run, slice] {
        const ScopedDevice on_device(run.device);
        if (run.output.requires_grad()) RunBackward(run.output, PlaceOn(Contiguous(slice), run.device));
      });
    }
    workers_->Run(tasks);
  }

  // The chunks' gradients concatenated along dim (zeros for a chunk that got none).
  Tensor InputGradient() const {
    std::vector<Tensor> chunks;
    for (const ReplicaRun& run : runs_) {
      Tensor g = run.input.grad();
      chunks.push_back(g.defined() ? PlaceOn(g, input_device_) : PlaceOn(ZerosLike(run.input), input_device_));
    }
    return Cat(chunks, dim_);
  }

  // The sum over replicas of parameter p's gradient (undefined when no replica produced one). Sums in
  // place into the first replica gradient: the replica leaves are private to this forward pass.
  Tensor ParameterGradient(size_t p) const {
    Tensor sum;
    for (const ReplicaRun& run : runs_) {
      Tensor g = run.params[p].grad();
      if (!g.defined()) continue;
      g = PlaceOn(g, param_devices_[p]);
      if (!sum.defined()) {
        sum = g;
      } else {
        AddInPlace(sum, g);
      }
    }
    return sum;
  }

  std::vector<ReplicaRun> runs_;
  int64_t dim_;
  Device input_device_;
  std::vector<Device> param_devices_;
  std::shared_ptr<DeviceWorkers> workers_;
};

}  // namespace

void RecordParallelBackward(const Tensor& gathered, const Tensor& input, const std::vector<Tensor>& params,
                            std::vector<ReplicaRun> runs, int64_t dim, std::shared_ptr<DeviceWorkers> workers) {
  DDP_CHECK(runs.size() <= static_cast<size_t>(workers->size()))
      << runs.size() << " replica runs for " << workers->size() << " workers";
  bool needed = GradModeEnabled() && input.requires_grad();
  for (const Tensor& p : params) needed = needed || (GradModeEnabled() && p.requires_grad());
  bool any_output = false;
  for (const ReplicaRun& run : runs) any_output = any_output || run.output.requires_grad();
  if (!needed || !any_output) return;
  std::vector<Device> param_devices;
  for (const Tensor& p : params) param_devices.push_back(p.device());
  auto node = std::make_shared<ParallelReplicaBackward>(std::move(runs), dim, input.device(),
                                                        std::move(param_devices), std::move(workers));
  node->next_edges.push_back(GradientEdge(input));
  for (const Tensor& p : params) node->next_edges.push_back(GradientEdge(p));
  gathered.impl()->requires_grad = true;
  gathered.impl()->grad_fn = std::move(node);
}

}  // namespace ddp
