#include "launch/node_rendezvous.h"

#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/check.h"

namespace ddp {
namespace {

constexpr char kRunIdKey[] = "ddprun/rdzv/run_id";
constexpr char kJoinedKey[] = "ddprun/rdzv/joined";
constexpr char kResultKey[] = "ddprun/rdzv/result";

std::string NodeKey(int node_rank) { return absl::StrCat("ddprun/rdzv/node/", node_rank); }

// The result the host publishes: "ok\n<nnodes>\n<master_port>\n<job_id>\n<master_addr>" or
// "error\n<message>".
std::string EncodeResult(const NodeAssignment& a) {
  return absl::StrCat("ok\n", a.nnodes, "\n", a.worker_master_port, "\n", a.job_id, "\n", a.master_addr);
}

absl::StatusOr<NodeAssignment> DecodeResult(const std::string& text) {
  std::vector<std::string> parts = absl::StrSplit(text, absl::MaxSplits('\n', 4));
  if (parts.size() == 2 && parts[0] == "error") return absl::FailedPreconditionError(parts[1]);
  NodeAssignment a;
  if (parts.size() != 5 || parts[0] != "ok" || !absl::SimpleAtoi(parts[1], &a.nnodes) ||
      !absl::SimpleAtoi(parts[2], &a.worker_master_port)) {
    return absl::InternalError(absl::StrCat("the rendezvous host published \"", text, "\""));
  }
  a.job_id = parts[3];
  a.master_addr = parts[4];
  return a;
}

// The host claims the endpoint for its run id; a joiner waits (up to its join timeout) for the host's claim
// and compares. Only the host writes the key, so a joiner of another job that arrives first cannot claim
// the endpoint and lock the real job out.
absl::Status CheckRunId(Store& store, const NodeRendezvousOptions& o) {
  std::string current;
  if (o.is_host) {
    DDP_ASSIGN_OR_RETURN(current, store.CompareSet(kRunIdKey, "", o.run_id));
  } else {
    absl::StatusOr<std::string> claimed = store.Get(kRunIdKey, o.join_timeout);
    if (absl::IsDeadlineExceeded(claimed.status())) {
      return absl::DeadlineExceededError(absl::StrCat("no rendezvous host claimed this endpoint within ",
                                                      absl::FormatDuration(o.join_timeout),
                                                      " (rdzv_conf join_timeout)"));
    }
    if (!claimed.ok()) return claimed.status();
    current = *std::move(claimed);
  }
  if (current == o.run_id) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("the rendezvous at this endpoint is for --rdzv_id=", current,
                                                    ", not --rdzv_id=", o.run_id, " (another job uses it)"));
}

// Host: waits for node `n`'s key until `deadline`; checks its nproc_per_node. Returns kDeadlineExceeded
// on timeout.
absl::Status AwaitNode(Store& store, const NodeRendezvousOptions& o, int n, absl::Time deadline) {
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return absl::DeadlineExceededError("no time left");
  DDP_RETURN_IF_ERROR(store.Wait({NodeKey(n)}, left));
  DDP_ASSIGN_OR_RETURN(std::string value, store.Get(NodeKey(n), absl::Seconds(10)));
  int nproc = 0;
  if (!absl::SimpleAtoi(value, &nproc) || nproc != o.nproc_per_node) {
    return absl::FailedPreconditionError(absl::StrCat(
        "node ", n, " runs --nproc_per_node=", value, " but node 0 runs ", o.nproc_per_node,
        ": every node of a job must start the same number of workers"));
  }
  return absl::OkStatus();
}

absl::StatusOr<NodeAssignment> Host(Store& store, const NodeRendezvousOptions& o) {
  NodeAssignment a;
  a.master_addr = o.master_addr;
  a.worker_master_port = o.worker_master_port;
  a.job_id = o.job_id;
  const absl::Time join_deadline = absl::Now() + o.join_timeout;
  int joined = 1;
  absl::Status failed;
  while (failed.ok() && joined < o.min_nodes) {
    failed = AwaitNode(store, o, joined, join_deadline);
    if (failed.ok()) ++joined;
  }
  if (absl::IsDeadlineExceeded(failed)) {
    failed = absl::DeadlineExceededError(absl::StrCat(
        "only ", joined, " of at least ", o.min_nodes, " nodes joined the rendezvous within ",
        absl::FormatDuration(o.join_timeout), " (--nnodes, rdzv_conf join_timeout)"));
  }
  const absl::Time last_call = absl::Now() + o.last_call_timeout;
  while (failed.ok() && joined < o.max_nodes) {
    absl::Status more = AwaitNode(store, o, joined, last_call);
    if (absl::IsDeadlineExceeded(more)) break;
    failed = more;
    if (failed.ok()) ++joined;
  }
  if (!failed.ok()) {
    (void)store.Set(kResultKey, absl::StrCat("error\n", failed.message()));
    return failed;
  }
  a.nnodes = joined;
  DDP_RETURN_IF_ERROR(store.Set(kResultKey, EncodeResult(a)));
  return a;
}

absl::StatusOr<NodeAssignment> Join(Store& store, const NodeRendezvousOptions& o) {
  DDP_ASSIGN_OR_RETURN(const int64_t slot, store.Add(kJoinedKey, 1));
  if (slot >= o.max_nodes) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the rendezvous admits at most ", o.max_nodes, " nodes (--nnodes) and this is node ", slot + 1));
  }
  DDP_RETURN_IF_ERROR(store.Set(NodeKey(static_cast<int>(slot)), absl::StrCat(o.nproc_per_node)));
  absl::StatusOr<std::string> text = store.Get(kResultKey, o.join_timeout);
  if (absl::IsDeadlineExceeded(text.status())) {
    return absl::DeadlineExceededError(absl::StrCat("the rendezvous did not complete within ",
                                                    absl::FormatDuration(o.join_timeout),
                                                    " (rdzv_conf join_timeout): too few nodes joined"));
  }
  if (!text.ok()) return text.status();
  DDP_ASSIGN_OR_RETURN(NodeAssignment a, DecodeResult(*text));
  if (slot >= a.nnodes) {
    return absl::FailedPreconditionError(absl::StrCat("the rendezvous closed with ", a.nnodes,
                                                      " nodes before this node joined (last_call_timeout)"));
  }
  a.node_rank = static_cast<int>(slot);
  return a;
}

}  // namespace

absl::StatusOr<NodeAssignment> JoinNodeRendezvous(Store& store, const NodeRendezvousOptions& options) {
  DDP_CHECK(options.min_nodes >= 1 && options.min_nodes <= options.max_nodes)
      << "nodes " << options.min_nodes << ":" << options.max_nodes;
  DDP_RETURN_IF_ERROR(CheckRunId(store, options));
  return options.is_host ? Host(store, options) : Join(store, options);
}

}  // namespace ddp
