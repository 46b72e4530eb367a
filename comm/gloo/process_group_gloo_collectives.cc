// ProcessGroupGloo's gather, scatter, all-to-all, point-to-point, monitored barrier and ring
// reduce-scatter (the rest of the backend is in process_group_gloo.cc).
#include <gloo/alltoall.h>
#include <gloo/gather.h>
#include <gloo/scatter.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "comm/gloo/process_group_gloo.h"
#include "comm/reduce_functions.h"
#include "base/check.h"

namespace ddp {

// Note [More collectives]
// Gather, Scatter and AllToAll move bytes only, so they hand Gloo's own algorithms (gloo/gather.h,
// scatter.h, alltoall.h) uint8_t buffers of the tensors' bytes: one code path for every dtype. Gloo takes
// one flat buffer where our interface takes a list of tensors (PyTorch's gather/scatter/all_to_all with
// lists), so Gather's root and AllToAll copy through a flat staging buffer; Scatter passes the root's
// tensors directly. They are collectives like the others: one sequence number, a tag from their
// signature (Note [Collective tags]), the group's timeout, and the failure path that names the call.
//
// Note [Point-to-point tags]
// Send and Recv involve two ranks, so they take no sequence number (the others would not advance theirs
// and every later collective's tag would disagree). Their Gloo slot is built from a prefix no Gloo
// collective uses (kPointToPointSlotPrefix) and GlooTag({user tag, "PointToPoint(tag T) of N dtype"}):
// both ends compute the same slot, and a Recv whose size or dtype differs from the Send lands on another
// slot, so it fails at the timeout instead of crashing Gloo's event loop. Gloo's send completes only when
// the peer has posted the matching receive, so the transfer is posted at once on the calling thread (as
// PyTorch does), and only its wait runs on the group's worker: a pair of ranks that each Send then Recv
// does not deadlock, and Works still complete in issue order. A failed transfer breaks the group, like a
// failed collective (its failure report is published with sequence kPointToPointSequence).
//
// Note [Ring reduce-scatter]
// Debian's libgloo has no reduce-scatter for the options-style API (gloo/reduce_scatter.h is the old
// halving-doubling algorithm class, typed per element with float-only reduce functions and a buffer
// layout of its own), so this is a ring written over unbound buffers. Rank r's input c is meant for
// rank c. Rank r first sends its input (r-1) mod W to rank r+1; in step s = 0 .. W-2 it receives from
// rank r-1 the partial reduction of chunk (r-s-2) mod W, reduces its own input of that chunk into it,
// and (except in the last step) passes it on to rank r+1. The last step's chunk is r itself, received
// straight into the output: after W-1 steps it holds every rank's contribution. Each rank sends
// (W-1)/W of its data once, half of what the all-reduce of the same buffer sends, and copies nothing:
// two partial buffers alternate (W > 2 only). Chunks travel in segments of kRingSegmentBytes, all posted
// at once; each segment is reduced as it arrives and sent on at once, so reduction, receiving and
// sending overlap across the ring.
//
// Note [Monitored barrier]
// PyTorch's monitored_barrier: rank 0 waits for every other rank's arrival key in the group's store, in
// rank order, each with what is left of the timeout; then it writes a release key, "ok" or the error
// naming the ranks that did not arrive, which the other ranks wait for (timeout plus
// kReleaseMargin) and return. The store (not Gloo) carries it so that a missing rank is seen as a key
// that never appears, not a broken connection. Keys are numbered per call, so every rank must call it
// the same number of times.

namespace {

constexpr uint8_t kPointToPointSlotPrefix = 0x40;   // beyond gloo/types.h's collective prefixes (0x01-0x08)
constexpr uint8_t kRingReduceScatterSlotPrefix = 0x41;
// Ring reduce-scatter chunks travel in segments of this size, so that reducing one segment overlaps
// receiving the next (as Gloo's own ring all-reduce does).
constexpr int64_t kRingSegmentBytes = int64_t{1} << 20;
constexpr uint32_t kPointToPointSequence = 0xffffffffu;  // the sequence published by a failed Send/Recv
constexpr absl::Duration kReleaseMargin = absl::Seconds(5);

std::chrono::milliseconds ToChrono(absl::Duration d) {
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
}

uint8_t* Bytes(const Tensor& t) { return static_cast<uint8_t*>(t.raw_data()); }

// Gloo's waits return false when aborted and throw on timeout; both become exceptions for GlooBody.
void WaitOrThrow(bool completed, const char* what) {
  if (!completed) throw std::runtime_error(absl::StrCat(what, " was aborted"));
}

}  // namespace

std::shared_ptr<Work> ProcessGroupGloo::IssueGather(const CollectiveSpec& spec, const std::vector<Tensor>& outputs,
                                                    const Tensor& input, int root) {
  return Issue(spec, GlooBody([this, outputs, input, root](uint32_t tag) {
    const size_t bytes = input.nbytes();
    if (bytes == 0) return;
    if (size() == 1) {
      std::memcpy(outputs[0].raw_data(), input.raw_data(), bytes);
      return;
    }
    std::vector<uint8_t> flat(rank() == root ? bytes * size() : 0);
    gloo::GatherOptions options(context_);
    options.setInput<uint8_t>(Bytes(input), bytes);
    if (rank() == root) options.setOutput<uint8_t>(flat.data(), flat.size());
    options.setRoot(root);
    options.setTag(tag);
    options.setTimeout(ToChrono(options_.timeout));
    gloo::gather(options);
    if (rank() != root) return;
    for (int r = 0; r < size(); ++r) std::memcpy(outputs[r].raw_data(), flat.data() + r * bytes, bytes);
  }));
}

std::shared_ptr<Work> ProcessGroupGloo::IssueScatter(const CollectiveSpec& spec, const Tensor& output,
                                                     const std::vector<Tensor>& inputs, int root) {
  return Issue(spec, GlooBody([this, output, inputs, root](uint32_t tag) {
    const size_t bytes = output.nbytes();
    if (bytes == 0) return;
    if (size() == 1) {
      std::memcpy(output.raw_data(), inputs[0].raw_data(), bytes);
      return;
    }
    gloo::ScatterOptions options(context_);
    if (rank() == root) {
      std::vector<uint8_t*> pointers;
      for (const Tensor& in : inputs) pointers.push_back(Bytes(in));
      options.setInputs<uint8_t>(pointers, bytes);
    }
    options.setOutput<uint8_t>(Bytes(output), bytes);
    options.setRoot(root);
    options.setTag(tag);
    options.setTimeout(ToChrono(options_.timeout));
    gloo::scatter(options);
  }));
}

std::shared_ptr<Work> ProcessGroupGloo::IssueAllToAll(const CollectiveSpec& spec, const std::vector<Tensor>& outputs,
                                                      const std::vector<Tensor>& inputs) {
  return Issue(spec, GlooBody([this, outputs, inputs](uint32_t tag) {
    const size_t bytes = inputs[0].nbytes();
    if (bytes == 0) return;
    if (size() == 1) {
      std::memcpy(outputs[0].raw_data(), inputs[0].raw_data(), bytes);
      return;
    }
    std::vector<uint8_t> flat_in(bytes * size()), flat_out(bytes * size());
    for (int r = 0; r < size(); ++r) std::memcpy(flat_in.data() + r * bytes, inputs[r].raw_data(), bytes);
    gloo::AlltoallOptions options(context_);
    options.setInput<uint8_t>(flat_in.data(), flat_in.size());
    options.setOutput<uint8_t>(flat_out.data(), flat_out.size());
    options.setTag(tag);
    options.setTimeout(ToChrono(options_.timeout));
    gloo::alltoall(options);
    for (int r = 0; r < size(); ++r) std::memcpy(outputs[r].raw_data(), flat_out.data() + r * bytes, bytes);
  }));
}

std::shared_ptr<Work> ProcessGroupGloo::Send(const Tensor& tensor, int dst, int tag) {
  return PointToPoint(CollectiveSpec::Send(tensor, dst, tag), tensor);
}

std::shared_ptr<Work> ProcessGroupGloo::Recv(const Tensor& tensor, int src, int tag) {
  return PointToPoint(CollectiveSpec::Recv(tensor, src, tag), tensor);
}

std::shared_ptr<Work> ProcessGroupGloo::PointToPoint(const CollectiveSpec& spec, const Tensor& tensor) {
  const bool send = spec.kind == CollectiveKind::kSend;
  const char* op = CollectiveKindName(spec.kind);
  const int peer = spec.root;
  CheckTensor(spec.kind, tensor);
  DDP_CHECK(peer >= 0 && peer < size() && peer != rank())
      << op << ": peer " << peer << " is not another rank of a group of " << size() << " (this is rank " << rank()
      << ")";
  DDP_CHECK(spec.tag >= 0) << op << ": tag " << spec.tag << " is negative";
  // Both ends build the same signature, hence the same slot (Note [Point-to-point tags]).
  const CollectiveCall call{kPointToPointSequence,
                            absl::StrCat("PointToPoint(tag ", spec.tag, ") of ", spec.Payload())};
  const uint64_t slot =
      gloo::Slot::build(kPointToPointSlotPrefix, GlooTag({static_cast<uint32_t>(spec.tag), call.signature}));
  QueuedIssueOptions unnumbered;
  unnumbered.numbered = false;  // Note [Point-to-point tags]
  // The transfer is posted at the call's place in issue order, as collectives are queued.
  return IssueStarted(
      spec,
      [&]() -> Body {
        std::shared_ptr<gloo::transport::UnboundBuffer> buffer;
        std::string post_error;
        if (tensor.nbytes() > 0) {
          try {
            buffer = context_->createUnboundBuffer(tensor.raw_data(), tensor.nbytes());
            if (send) {
              buffer->send(peer, slot);
            } else {
              buffer->recv(peer, slot);
            }
          } catch (const std::exception& e) {
            post_error = e.what();
          }
        }
        return GlooBody(
            [buffer, tensor, send, post_error, timeout = options_.timeout](uint32_t) {
              if (!post_error.empty()) throw std::runtime_error(absl::StrCat("posting the transfer: ", post_error));
              if (buffer == nullptr) return;  // nothing to move
              if (send) {
                WaitOrThrow(buffer->waitSend(ToChrono(timeout)), "the send");
              } else {
                WaitOrThrow(buffer->waitRecv(ToChrono(timeout)), "the receive");
              }
            },
            call);
      },
      unnumbered);
}

void ProcessGroupGloo::RingReduceScatter(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op,
                                         uint32_t tag) {
  const int64_t n = output.numel();
  if (n == 0) return;
  if (size() == 1) {
    std::memcpy(output.raw_data(), inputs[0].raw_data(), output.nbytes());  // avg over one rank: unchanged
    return;
  }
  // Note [Ring reduce-scatter]: step s receives into partial[s % 2] (the output at the last step) while
  // the segments of partial[(s + 1) % 2] received at step s - 1 are still being sent.
  const size_t element = output.nbytes() / n;
  const int64_t segment = std::max<int64_t>(1, kRingSegmentBytes / static_cast<int64_t>(element));
  const int64_t segments = (n + segment - 1) / segment;
  auto chunk_of = [this](int step_back) { return ((rank() - step_back) % size() + size()) % size(); };
  std::vector<Tensor> partial;
  for (int i = 0; i < 2 && size() > 2; ++i) partial.push_back(Tensor::Empty({n}, output.dtype()));
  auto buffer_over = [this](const Tensor& t) { return context_->createUnboundBuffer(t.raw_data(), t.nbytes()); };
  std::unique_ptr<gloo::transport::UnboundBuffer> first = buffer_over(inputs[chunk_of(1)]);
  std::unique_ptr<gloo::transport::UnboundBuffer> last = buffer_over(output);
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> middle;
  for (const Tensor& t : partial) middle.push_back(buffer_over(t));
  std::vector<int> pending_sends(2, 0);  // per middle buffer
  const int right = (rank() + 1) % size();
  const int left = (rank() + size() - 1) % size();
  const uint64_t slot = gloo::Slot::build(kRingReduceScatterSlotPrefix, tag);
  const RawReduceFunction reduce = GetReduceFunction(output.dtype(), op);
  const auto timeout = ToChrono(options_.timeout);
  auto segment_range = [&](int64_t k) {  // {byte offset, bytes} of segment k
    const int64_t begin = k * segment;
    return std::pair<size_t, size_t>(begin * element, (std::min(n, begin + segment) - begin) * element);
  };
  for (int64_t k = 0; k < segments; ++k) first->send(right, slot, segment_range(k).first, segment_range(k).second);
  for (int step = 0; step < size() - 1; ++step) {
    const bool is_last = step == size() - 2;
    gloo::transport::UnboundBuffer& target = is_last ? *last : *middle[step % 2];
    if (!is_last) {  // the sends of step - 2 from this buffer must be done before it is overwritten
      for (; pending_sends[step % 2] > 0; --pending_sends[step % 2]) {
        WaitOrThrow(target.waitSend(timeout), "a ring send");
      }
    }
    for (int64_t k = 0; k < segments; ++k) target.recv(left, slot, segment_range(k).first, segment_range(k).second);
    const uint8_t* own = Bytes(inputs[chunk_of(step + 2)]);
    for (int64_t k = 0; k < segments; ++k) {
      WaitOrThrow(target.waitRecv(timeout), "a ring receive");
      const auto [offset, bytes] = segment_range(k);
      uint8_t* received = static_cast<uint8_t*>(target.ptr) + offset;
      reduce(received, received, own + offset, bytes / element);
      if (!is_last) {
        target.send(right, slot, offset, bytes);
        ++pending_sends[step % 2];
      }
    }
  }
  for (int64_t k = 0; k < segments; ++k) WaitOrThrow(first->waitSend(timeout), "a ring send");
  for (int i = 0; i < static_cast<int>(middle.size()); ++i) {
    for (; pending_sends[i] > 0; --pending_sends[i]) WaitOrThrow(middle[i]->waitSend(timeout), "a ring send");
  }
  if (op == ReduceOp::kAvg) DivideInPlace(output.raw_data(), output.dtype(), n, size());
}

absl::Status ProcessGroupGloo::MonitoredBarrier(absl::Duration timeout, bool wait_all_ranks) {
  const int64_t number = monitored_barriers_.fetch_add(1);
  const std::string name = DescribeCall(CollectiveSpec::MonitoredBarrier(), number, rank(), size(), "gloo");
  if (size() == 1) return absl::OkStatus();
  const std::string prefix = absl::StrCat("gloo/monitored_barrier/", number, "/");
  const std::string release_key = prefix + "release";
  if (rank() != 0) {  // Note [Monitored barrier]
    absl::Status arrived = store_->Set(absl::StrCat(prefix, "arrived/", rank()), "1");
    if (!arrived.ok()) return absl::Status(arrived.code(), absl::StrCat(name, ": ", arrived.message()));
    absl::StatusOr<std::string> release = store_->Get(release_key, timeout + kReleaseMargin);
    if (!release.ok()) {
      return absl::Status(release.status().code(), absl::StrCat(name, ": rank 0 did not release the barrier within ",
                                                                absl::FormatDuration(timeout + kReleaseMargin), ": ",
                                                                release.status().message()));
    }
    if (*release == "ok") return absl::OkStatus();
    return absl::DeadlineExceededError(absl::StrCat(name, ": ", *release));
  }
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<int> missing;
  for (int r = 1; r < size() && (wait_all_ranks || missing.empty()); ++r) {
    const absl::Duration left = std::max(deadline - absl::Now(), absl::Milliseconds(1));
    absl::Status status = store_->Wait({absl::StrCat(prefix, "arrived/", r)}, left);
    if (status.code() == absl::StatusCode::kDeadlineExceeded) {
      missing.push_back(r);
    } else if (!status.ok()) {
      return absl::Status(status.code(), absl::StrCat(name, ": waiting for rank ", r, ": ", status.message()));
    }
  }
  if (missing.empty()) return store_->Set(release_key, "ok");
  const std::string error =
      absl::StrCat(missing.size() == 1 ? "rank " : "ranks ", absl::StrJoin(missing, ", "),
                   missing.size() == 1 ? " has" : " have", " not arrived at MonitoredBarrier #", number,
                   " within ", absl::FormatDuration(timeout),
                   wait_all_ranks ? "" : " (the first missing rank; wait_all_ranks=true names every one)");
  (void)store_->Set(release_key, error);  // best effort: the arrived ranks then fail at once with it
  return absl::DeadlineExceededError(absl::StrCat(name, ": ", error));
}

}  // namespace ddp
