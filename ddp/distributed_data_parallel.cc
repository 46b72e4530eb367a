#include "ddp/distributed_data_parallel.h"

#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "comm/rank_agreement.h"
#include "ddp/join.h"
#include "tensor/autograd.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

// One line per parameter and buffer: "p fc1.weight [512, 784] float32".
std::vector<std::string> ModelSignature(const Module& module) {
  std::vector<std::string> lines;
  for (const auto& [name, t] : module.NamedParameters()) {
    lines.push_back(absl::StrCat("parameter ", name, " ", ShapeToString(t.shape()), " ", DTypeName(t.dtype())));
  }
  for (const auto& [name, t] : module.NamedBuffers()) {
    lines.push_back(absl::StrCat("buffer ", name, " ", ShapeToString(t.shape()), " ", DTypeName(t.dtype())));
  }
  return lines;
}

// Copies contiguous `tensors` into consecutive regions of `flat` (or back, when `unpack`), on whatever
// device they live (CopyInPlace dispatches; memcpy would read GPU pointers on the host).
void PackInto(const std::vector<Tensor>& tensors, const Tensor& flat, bool unpack) {
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    const Tensor region = Tensor::View(flat.storage(), {t.numel()}, {1}, flat.storage_offset() + offset, t.dtype());
    const Tensor whole = Tensor::View(t.storage(), {t.numel()}, {1}, t.storage_offset(), t.dtype());
    if (unpack) {
      CopyInPlace(whole, region);
    } else {
      CopyInPlace(region, whole);
    }
    offset += t.numel();
  }
}

}  // namespace

absl::Status VerifyModelsMatch(const Module& module, ProcessGroup& group) {
  std::vector<std::string> all;
  DDP_RETURN_IF_ERROR(group.AllGatherObject(absl::StrJoin(ModelSignature(module), "\n"), &all));
  const std::vector<std::string> reference = absl::StrSplit(all[0], '\n');
  for (size_t r = 1; r < all.size(); ++r) {
    const std::vector<std::string> other = absl::StrSplit(all[r], '\n');
    for (size_t i = 0; i < std::max(reference.size(), other.size()); ++i) {
      const std::string a = i < reference.size() ? reference[i] : "(nothing)";
      const std::string b = i < other.size() ? other[i] : "(nothing)";
      if (a != b) {
        return absl::FailedPreconditionError(absl::StrCat(
            "DDP: models differ across ranks at entry ", i, ": rank 0 has ", a, " but rank ", r, " has ", b,
            ". Every rank must build the same model."));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status BroadcastCoalesced(const std::vector<Tensor>& tensors, ProcessGroup& group, int root,
                                size_t chunk_bytes) {
  std::map<int, std::vector<Tensor>> by_dtype;
  for (const Tensor& t : tensors) {
    DDP_CHECK(t.is_contiguous()) << "BroadcastCoalesced: '" << t.name() << "' is not contiguous";
    by_dtype[static_cast<int>(t.dtype())].push_back(t);
  }
  for (auto& [dtype, list] : by_dtype) {
    size_t start = 0;
    while (start < list.size()) {
      std::vector<Tensor> chunk;
      size_t bytes = 0;
      while (start < list.size() && (chunk.empty() || bytes + list[start].nbytes() <= chunk_bytes)) {
        bytes += list[start].nbytes();
        chunk.push_back(list[start++]);
      }
      const size_t element = ElementSize(chunk[0].dtype());
      Tensor flat = Tensor::Empty({static_cast<int64_t>(bytes / element)}, chunk[0].dtype(), chunk[0].device());
      PackInto(chunk, flat, /*unpack=*/false);
      DDP_RETURN_IF_ERROR(group.Broadcast(flat, root)->Wait(group.timeout()));
      if (group.rank() != root) PackInto(chunk, flat, /*unpack=*/true);
    }
  }
  return absl::OkStatus();
}

namespace {

// Bucket k's element count, dtype and device, e.g. "263680 float32 cpu; 1470 float32 cpu".
std::string BucketLayoutText(const Reducer& reducer, const std::vector<Tensor>& params) {
  std::vector<std::string> buckets;
  for (const std::vector<size_t>& bucket : reducer.bucket_assignment()) {
    int64_t numel = 0;
    for (size_t index : bucket) numel += params[index].numel();
    const Tensor& first = params[bucket.front()];
    buckets.push_back(absl::StrCat(numel, " ", DTypeName(first.dtype()), " ", first.device().ToString()));
  }
  return absl::StrJoin(buckets, "; ");
}

// Note [DDP settings agreement]: what every rank must share, or its collectives stop matching (bucket
// caps and so the layout, the hook, the unused-parameter search, buffer broadcasts and their chunking).
// Without the check, ranks started by hand with different flags would crash inside Gloo or reduce buffers
// of different sizes against each other; one exchange at wrap time names the setting instead.
std::vector<AgreedField> SettingsToAgree(const DdpOptions& options, const Reducer& reducer,
                                         const std::vector<Tensor>& params, int world_size) {
  const ReducerOptions& r = options.reducer;
  auto flag = [](bool b) { return std::string(b ? "true" : "false"); };
  return {
      {"world_size", absl::StrCat(world_size)},
      {"bucket_cap_bytes", absl::StrCat(r.caps.bucket_cap_bytes)},
      {"first_bucket_cap_bytes", absl::StrCat(r.caps.first_bucket_cap_bytes)},
      {"bucket layout", BucketLayoutText(reducer, params)},
      {"comm_hook", r.comm_hook != nullptr ? r.comm_hook->name() : "allreduce"},
      {"reduce_dtype", DTypeName(options.mixed_precision.reduce_dtype)},
      {"find_unused_parameters", flag(r.find_unused_parameters)},
      {"static_graph", flag(r.static_graph)},
      {"gradient_as_bucket_view", flag(r.gradient_as_bucket_view)},
      {"rebuild_buckets", flag(r.rebuild_buckets)},
      {"broadcast_buffers", flag(options.broadcast_buffers)},
      {"broadcast_chunk_bytes", absl::StrCat(options.broadcast_chunk_bytes)},
  };
}

}  // namespace

absl::StatusOr<std::shared_ptr<DistributedDataParallel>> DistributedDataParallel::Create(
    std::shared_ptr<Module> module, ProcessGroup* group, DdpOptions options) {
  DDP_CHECK(module != nullptr && group != nullptr) << "DistributedDataParallel needs a module and a group";
  module->AssignTensorNames();
  DDP_RETURN_IF_ERROR(CheckDdpMixedPrecision(options.mixed_precision, options.reducer));
  options.reducer.reduce_dtype = options.mixed_precision.reduce_dtype;
  DDP_RETURN_IF_ERROR(VerifyModelsMatch(*module, *group));
  std::shared_ptr<DistributedDataParallel> ddp(new DistributedDataParallel(module, group, std::move(options)));
  const std::vector<Tensor> params = module->Parameters();
  DDP_RETURN_IF_ERROR(
      CheckRanksAgree(*group, SettingsToAgree(ddp->options_, *ddp->reducer_, params, group->size()), "DDP settings"));
  {
    NoGradGuard no_grad;
    std::vector<Tensor> state = params;
    for (const Tensor& b : module->Buffers()) state.push_back(b);
    DDP_RETURN_IF_ERROR(BroadcastCoalesced(state, *group, 0, ddp->options_.broadcast_chunk_bytes));
  }
  return ddp;
}

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<Module> module, ProcessGroup* group,
                                                 DdpOptions options)
    : Module("DistributedDataParallel"), module_(module), group_(group), options_(std::move(options)) {
  RegisterModule("module", module);
  std::vector<Tensor> params;
  std::vector<std::string> names;
  for (const auto& [name, p] : module_->NamedParameters()) {
    params.push_back(p);
    names.push_back(name);
  }
  reducer_ = std::make_unique<Reducer>(std::move(params), std::move(names), group_, options_.reducer);
}

absl::Status DistributedDataParallel::RegisterCommHook(std::shared_ptr<CommHook> hook) {
  if (forward_ran_) {
    return absl::FailedPreconditionError(
        "DDP RegisterCommHook: a forward pass already ran; register the hook right after wrapping the module");
  }
  const std::string name = hook != nullptr ? hook->name() : "allreduce";
  ReducerOptions with_hook = options_.reducer;
  with_hook.comm_hook = hook;
  with_hook.reduce_dtype = DType::kFloat32;  // already checked against mixed_precision at Create
  DDP_RETURN_IF_ERROR(CheckDdpMixedPrecision(options_.mixed_precision, with_hook));
  DDP_RETURN_IF_ERROR(CheckRanksAgree(*group_, {{"comm_hook", name}}, "DDP RegisterCommHook"));
  options_.reducer.comm_hook = hook;
  reducer_->SetCommHook(std::move(hook));
  return absl::OkStatus();
}

absl::Status DistributedDataParallel::BroadcastBuffers() {
  std::vector<Tensor> buffers = module_->Buffers();
  if (buffers.empty() || group_->size() == 1) return absl::OkStatus();
  return BroadcastCoalesced(buffers, *group_, 0, options_.broadcast_chunk_bytes);
}

absl::Status DistributedDataParallel::BeforeModuleForward(absl::Time* start) {
  *start = reducer_->observed() ? absl::Now() : absl::Time();  // Note [Reducer observers]
  DDP_RETURN_IF_ERROR(reducer_->status());
  forward_ran_ = true;
  const bool syncs = is_training() && GradModeEnabled() && require_sync_;
  if (is_training() && join_ != nullptr) DDP_RETURN_IF_ERROR(join_->AnnounceTraining(syncs));  // Note [Join]
  if (is_training() && options_.broadcast_buffers) DDP_RETURN_IF_ERROR(BroadcastBuffers());
  return absl::OkStatus();
}

absl::Status DistributedDataParallel::AfterModuleForward(const std::vector<Tensor>& outputs, absl::Time start) {
  if (!is_training() || !GradModeEnabled()) return absl::OkStatus();
  if (!require_sync_) {
    reducer_->SkipNextSync();
    return absl::OkStatus();
  }
  return reducer_->PrepareForBackward(outputs, start);
}

absl::StatusOr<Tensor> DistributedDataParallel::TryForward(const Tensor& x) {
  absl::Time start;
  DDP_RETURN_IF_ERROR(BeforeModuleForward(&start));
  Tensor out = module_->Forward(x);
  DDP_RETURN_IF_ERROR(AfterModuleForward({out}, start));
  return out;
}

absl::StatusOr<TensorList> DistributedDataParallel::TryForwardMany(const TensorList& inputs) {
  absl::Time start;
  DDP_RETURN_IF_ERROR(BeforeModuleForward(&start));
  TensorList outputs = module_->ForwardMany(inputs);
  DDP_RETURN_IF_ERROR(AfterModuleForward(outputs.tensors(), start));
  return outputs;
}

Tensor DistributedDataParallel::Forward(const Tensor& x) {
  absl::StatusOr<Tensor> out = TryForward(x);
  DDP_CHECK(out.ok()) << out.status().message();
  return *out;
}

TensorList DistributedDataParallel::ForwardMany(const TensorList& inputs) {
  absl::StatusOr<TensorList> out = TryForwardMany(inputs);
  DDP_CHECK(out.ok()) << out.status().message();
  return *std::move(out);
}

std::shared_ptr<Module> DistributedDataParallel::Replicate() const {
  DDP_CHECK(false) << "DistributedDataParallel cannot be replicated; replicate the wrapped module";
  return nullptr;
}

void internal::SetDdpAblations(DistributedDataParallel& ddp, const ReducerAblations& ablations) {
  SetReducerAblations(*ddp.reducer_, ablations);
}

}  // namespace ddp
