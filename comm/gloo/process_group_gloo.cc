#include "comm/gloo/process_group_gloo.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include <signal.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "comm/collective_tensors.h"
#include "comm/gloo/gloo_store_adapter.h"
#include "comm/host_staging.h"
#include "comm/rendezvous_checks.h"
#include "comm/reduce_functions.h"
#include "store/socket_util.h"
#include "tensor/ops.h"

namespace ddp {

namespace {

std::chrono::milliseconds ToChrono(absl::Duration d) {
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
}

// Sets Gloo's typed input/output pointer for `dtype` (16-bit floats travel as uint16_t).
template <typename Options>
void SetOutput(Options& options, void* data, DType dtype, size_t count) {
  switch (dtype) {
    case DType::kFloat32:
      options.template setOutput<float>(static_cast<float*>(data), count);
      break;
    case DType::kInt64:
      options.template setOutput<int64_t>(static_cast<int64_t*>(data), count);
      break;
    default:
      options.template setOutput<uint16_t>(static_cast<uint16_t*>(data), count);
      break;
  }
}
template <typename Options>
void SetInput(Options& options, void* data, DType dtype, size_t count) {
  switch (dtype) {
    case DType::kFloat32:
      options.template setInput<float>(static_cast<float*>(data), count);
      break;
    case DType::kInt64:
      options.template setInput<int64_t>(static_cast<int64_t*>(data), count);
      break;
    default:
      options.template setInput<uint16_t>(static_cast<uint16_t*>(data), count);
      break;
  }
}

// Throws the failed Status of a staging step (GlooBody turns exceptions into the Work's failure).
void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) throw std::runtime_error(std::string(status.message()));
}

// The key libgloo's connectFullMesh writes first for rank `rank` (its host name; libgloo
// 0.0~git20220518): a rank without it never reached Gloo's rendezvous. The missing-peer tests check it.
std::string GlooPresenceKey(int rank) { return absl::StrCat("rank_", rank); }

// Note [Waiter runs the work]
// Every collective is queued for the group's worker thread, so the caller gets its Work at once (the
// Reducer launches buckets from gradient hooks and must not block). But when the caller then Waits, the
// collective costs two thread hand-offs on top of Gloo's own: waking the worker for it and waking the
// waiter at its end. On a 2-core machine, with both ranks' main, worker and Gloo loop threads sharing the
// cores, each hand-off is a scheduling delay (BENCHMARKS.md, section Gloo inside training): tens of
// microseconds at real-time priority, and at normal priority on a busy machine often a scheduler tick
// (4 ms) or more. So a thread that Waits on
// a Work still queued, next in line and with nothing running (the worker has not picked it up yet),
// takes the queue's turn and runs the collective itself (WorkQueue::RunIfNext), exactly as the worker
// would: same tag, same timeout, same failure path; the worker and later collectives wait behind it, so
// issue order holds. This is the inline path of Note [Inline collectives] (comm/shm/process_group_shm.cc)
// moved to where blocking is harmless: only a thread that blocks for this very collective runs it, so
// overlap is never lost, and a Wait with less than the group's timeout never runs it (a Gloo call may
// block for the whole group timeout). A Work behind another task, or already running, is waited for as
// usual. Gloo's own hand-offs (its device loop thread reads every message and wakes the calling thread)
// remain: Pair::setSync would move the reads to the calling thread, but gloo::allreduce's unbound
// buffers are served by the loop thread only. QueuedWork::Wait (comm/queued_process_group.h) does it
// for this group and for ProcessGroupShm.
// What the queued skeleton needs of the group's options; failures exchange reports through `store`
// (Note [Hang postmortem]) under the failure reports' keys.
QueuedProcessGroupOptions QueuedGroupOptionsOf(const ProcessGroupGlooOptions& options, Store* store,
                                               std::string group_id) {
  QueuedProcessGroupOptions queued;
  queued.backend = "gloo";
  queued.timeout = options.timeout;
  queued.waiter_runs_work = true;  // Note [Waiter runs the work]
  queued.postmortem.recorder = options.flight_recorder;
  queued.postmortem.group_id = std::move(group_id);
  queued.postmortem.store = store;
  queued.postmortem.report_key_prefix = "gloo/failure_report/";
  queued.postmortem.window = options.failure_report_window;
  queued.postmortem.store_host_rank = options.store_host_rank;
  return queued;
}

// Gloo's rendezvous: a full mesh of TCP pairs. Every exception becomes a Status naming the ranks that
// never joined, when the store shows some.
absl::StatusOr<std::shared_ptr<gloo::Context>> ConnectFullMesh(Store& store, int rank, int size,
                                                               const ProcessGroupGlooOptions& options) {
  std::string what;
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.hostname;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context->setTimeout(ToChrono(options.timeout));
    GlooStoreAdapter adapter(&store, options.timeout);
    context->connectFullMesh(adapter, device);
    return context;
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
    what = "unknown exception";
  }
  const std::string never_joined = DescribeNeverJoined(store, RanksNotJoined(store, rank, size, GlooPresenceKey));
  return absl::UnavailableError(absl::StrCat("gloo: rank ", rank, " of ", size, " could not connect to its peers",
                                             never_joined.empty() ? "" : ": " + never_joined, " (",
                                             options.hostname, ", timeout ", absl::FormatDuration(options.timeout),
                                             "): ", what));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ProcessGroupGloo>> ProcessGroupGloo::Create(
    Store& store, int rank, int size, const ProcessGroupGlooOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("gloo: rank ", rank, " is outside a group of ", size));
  }
  IgnoreSigpipeIfDefault();  // a dead peer must fail a collective, not kill the process
  if (absl::Status same = CheckSameWorldSize(store, rank, size); !same.ok()) {
    return absl::Status(same.code(), absl::StrCat("gloo: rank ", rank, " of ", size, " cannot join: ", same.message()));
  }
  ProcessGroupGlooOptions resolved = options;
  if (!resolved.flight_recorder.has_value()) {
    absl::StatusOr<FlightRecorderOptions> recorder = FlightRecorderOptionsFromEnv(ProcessEnv());
    if (!recorder.ok()) return absl::Status(recorder.status().code(), absl::StrCat("gloo: ", recorder.status().message()));
    resolved.flight_recorder = *recorder;
  }
  // Rank 0 publishes the group id before the mesh, so the others, after it, read it without waiting.
  absl::StatusOr<std::string> group_id;
  if (rank == 0) group_id = AgreeFlightGroupId(store, rank, options.timeout);
  DDP_ASSIGN_OR_RETURN(std::shared_ptr<gloo::Context> context, ConnectFullMesh(store, rank, size, options));
  if (rank != 0) group_id = AgreeFlightGroupId(store, rank, options.timeout);
  if (!group_id.ok()) return absl::Status(group_id.status().code(), absl::StrCat("gloo: ", group_id.status().message()));
  return std::unique_ptr<ProcessGroupGloo>(
      new ProcessGroupGloo(std::move(context), &store, rank, size, std::move(resolved), *std::move(group_id)));
}

absl::StatusOr<std::unique_ptr<ProcessGroupGloo>> ProcessGroupGloo::CreateOwningStore(
    std::unique_ptr<Store> store, int rank, int size, const ProcessGroupGlooOptions& options) {
  DDP_CHECK(store != nullptr) << "ProcessGroupGloo::CreateOwningStore needs a store";
  DDP_ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroupGloo> group, Create(*store, rank, size, options));
  group->owned_store_ = std::move(store);
  return group;
}

ProcessGroupGloo::ProcessGroupGloo(std::shared_ptr<gloo::Context> context, Store* store, int rank, int size,
                                   ProcessGroupGlooOptions options, std::string group_id)
    : QueuedProcessGroup(rank, size, QueuedGroupOptionsOf(options, store, std::move(group_id))),
      context_(std::move(context)),
      store_(store),
      options_(std::move(options)) {}

// Works may keep the queue alive; stopping it makes sure no task, which uses this group, runs after it
// is gone.
ProcessGroupGloo::~ProcessGroupGloo() { StopQueue(); }

void ProcessGroupGloo::CheckTensor(CollectiveKind kind, const Tensor& t) const {
#ifdef DDP_WITH_CUDA
  // AllReduce and Broadcast also take CUDA tensors, staged through host memory (Note [Host staging]).
  if (t.device().is_cuda() && (kind == CollectiveKind::kAllReduce || kind == CollectiveKind::kBroadcast)) {
    DDP_CHECK(t.is_contiguous()) << CollectiveKindName(kind) << " (gloo): tensor must be contiguous";
    return;
  }
#endif
  CheckCpuCollectiveTensor(kind, "gloo", t,
                           " (CUDA tensors in AllReduce and Broadcast only, with --config=cuda)");
}

QueuedProcessGroup::Body ProcessGroupGloo::GlooBody(std::function<void(uint32_t)> body,
                                                    std::optional<CollectiveCall> fixed_call) {
  return [this, body = std::move(body), fixed_call = std::move(fixed_call)](const RunningCall& running) {
    const CollectiveCall call =
        fixed_call ? *fixed_call
                   : CollectiveCall{static_cast<uint32_t>(running.work->sequence()), running.work->spec().Signature()};
    std::string what;
    try {
      body(GlooTag(call));
      return absl::OkStatus();
    } catch (const std::exception& e) {  // gloo::IoException, gloo::EnforceNotMet, std::bad_alloc, ...
      what = e.what();
    } catch (...) {
      what = "unknown exception";
    }
    return Fail(call, absl::StrCat(running(), ": ", what), *running.work);
  };
}

absl::Status ProcessGroupGloo::Fail(const CollectiveCall& call, const std::string& failure, const QueuedWork& work) {
  // The group is broken: closing every connection makes the peers still waiting on this rank fail
  // now rather than at their timeout, so they report too (Note [Failure reports]).
  try {
    context_->closeConnections();
  } catch (...) {  // a pair that cannot close cleanly changes nothing: the group has failed already
  }
  // Each rank's report carries its call, so the mismatch needs no store round of its own.
  const PostmortemResult postmortem = this->postmortem().Explain(failure, call, &work);
  std::map<int, CollectiveCall> others = postmortem.calls;
  others.erase(rank());
  const std::string mismatch = DescribeCallMismatch(rank(), call, others);
  if (mismatch.empty()) return absl::UnavailableError(absl::StrCat(failure, postmortem.text));
  return absl::FailedPreconditionError(absl::StrCat(failure, "; ", mismatch,
                                                    " (DDP_DEBUG=detail reports this before the call)", postmortem.text));
}

std::shared_ptr<Work> ProcessGroupGloo::IssueAllReduce(const CollectiveSpec& spec, const Tensor& tensor, ReduceOp op) {
  absl::StatusOr<std::shared_ptr<HostStaging>> staging = HostStaging::Begin(tensor);
  QueuedIssueOptions issue;
  issue.waiter_may_run = tensor.device().is_cpu();  // staging copies use the worker's streams
  return Issue(spec, GlooBody([this, staging, op](uint32_t tag) {
                 ThrowIfError(staging.status());
                 absl::StatusOr<Tensor> host = (*staging)->CopyToHost(options_.timeout);
                 ThrowIfError(host.status());
                 AllReduceOnHost(*host, op, tag);
                 ThrowIfError((*staging)->CopyBack(options_.timeout));
               }),
               issue);
}

void ProcessGroupGloo::AllReduceOnHost(const Tensor& tensor, ReduceOp op, uint32_t tag) {
  if (tensor.numel() == 0 || size() == 1) {
    if (op == ReduceOp::kAvg && size() > 1) DivideInPlace(tensor.raw_data(), tensor.dtype(), tensor.numel(), size());
    return;
  }
  gloo::AllreduceOptions options(context_);
  SetOutput(options, tensor.raw_data(), tensor.dtype(), tensor.numel());
  RawReduceFunction fn = GetReduceFunction(tensor.dtype(), op);
  options.setReduceFunction(fn);
  options.setTag(tag);
  options.setTimeout(ToChrono(options_.timeout));
  gloo::allreduce(options);
  if (op == ReduceOp::kAvg) DivideInPlace(tensor.raw_data(), tensor.dtype(), tensor.numel(), size());
}

std::shared_ptr<Work> ProcessGroupGloo::IssueBroadcast(const CollectiveSpec& spec, const Tensor& tensor, int root) {
  absl::StatusOr<std::shared_ptr<HostStaging>> staging = HostStaging::Begin(tensor);
  QueuedIssueOptions issue;
  issue.waiter_may_run = tensor.device().is_cpu();  // staging copies use the worker's streams
  return Issue(spec, GlooBody([this, staging, root, numel = tensor.numel()](uint32_t tag) {
                 ThrowIfError(staging.status());
                 if (numel == 0 || size() == 1) return;
                 absl::StatusOr<Tensor> host = (*staging)->CopyToHost(options_.timeout);
                 ThrowIfError(host.status());
                 gloo::BroadcastOptions options(context_);
                 SetOutput(options, host->raw_data(), host->dtype(), host->numel());
                 options.setRoot(root);
                 options.setTag(tag);
                 options.setTimeout(ToChrono(options_.timeout));
                 gloo::broadcast(options);
                 ThrowIfError((*staging)->CopyBack(options_.timeout));
               }),
               issue);
}

std::shared_ptr<Work> ProcessGroupGloo::IssueAllGather(const CollectiveSpec& spec, const std::vector<Tensor>& outputs,
                                                       const Tensor& input) {
  return Issue(spec, GlooBody([this, outputs, input](uint32_t tag) {
                 const size_t bytes = input.nbytes();
                 if (input.numel() == 0) return;
                 Tensor flat = Tensor::Empty({static_cast<int64_t>(size()) * input.numel()}, input.dtype());
                 if (size() == 1) {
                   std::memcpy(flat.raw_data(), input.raw_data(), bytes);
                 } else {
                   gloo::AllgatherOptions options(context_);
                   SetInput(options, input.raw_data(), input.dtype(), input.numel());
                   SetOutput(options, flat.raw_data(), input.dtype(), flat.numel());
                   options.setTag(tag);
                   options.setTimeout(ToChrono(options_.timeout));
                   gloo::allgather(options);
                 }
                 for (int r = 0; r < size(); ++r) {
                   std::memcpy(outputs[r].raw_data(), static_cast<char*>(flat.raw_data()) + r * bytes, bytes);
                 }
               }));
}

std::shared_ptr<Work> ProcessGroupGloo::IssueReduceScatter(const CollectiveSpec& spec, const Tensor& output,
                                                           const std::vector<Tensor>& inputs, ReduceOp op) {
  return Issue(spec,
               GlooBody([this, output, inputs, op](uint32_t tag) { RingReduceScatter(output, inputs, op, tag); }));
}

std::shared_ptr<Work> ProcessGroupGloo::IssueReduce(const CollectiveSpec& spec, const Tensor& tensor, int root,
                                                    ReduceOp op) {
  return Issue(spec, GlooBody([this, tensor, root, op](uint32_t tag) {
                 if (tensor.numel() == 0 || size() == 1) return;
                 gloo::ReduceOptions options(context_);
                 SetOutput(options, tensor.raw_data(), tensor.dtype(), tensor.numel());
                 options.setRoot(root);
                 options.setReduceFunction(GetReduceFunction(tensor.dtype(), op));
                 options.setTag(tag);
                 options.setTimeout(ToChrono(options_.timeout));
                 gloo::reduce(options);
                 if (op == ReduceOp::kAvg && rank() == root) {
                   DivideInPlace(tensor.raw_data(), tensor.dtype(), tensor.numel(), size());
                 }
               }));
}

std::shared_ptr<Work> ProcessGroupGloo::IssueBarrier(const CollectiveSpec& spec) {
  return Issue(spec, GlooBody([this](uint32_t tag) {
                 if (size() == 1) return;
                 gloo::BarrierOptions options(context_);
                 options.setTag(tag);
                 options.setTimeout(ToChrono(options_.timeout));
                 gloo::barrier(options);
               }));
}

}  // namespace ddp
