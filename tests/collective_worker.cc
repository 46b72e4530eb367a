// collective_worker: an end-to-end check of the communication layer, meant to run under ddprun (or
// any torchrun-style launcher). Each rank joins the group with InitProcessGroup, runs every collective
// of ProcessGroup on float32 tensors of 0, 1 and 1001 elements (and, with --large, one 64 MiB
// all-reduce) and compares every result with a sequential reference it computes itself: every rank's
// input is a pure function of (rank, element, salt), so each rank knows all of them.
//
//   ddprun --nproc_per_node=4 --master_port=0 bazel-bin/tests/collective_worker [--large] [--backend=shm]
//
// Failure injection (tests/collectives_process_test.cc): with --die_at_rank=R every rank loops over
// large all-reduces and rank R kills itself with SIGKILL after --die_after_ms; the survivors must see
// their collective fail (peer gone, or DDP_TIMEOUT_S) and report it.
//
// Exit codes: 0 every check passed; 1 a result differed from the reference (the message names the
// collective, size and element); 2 the group could not be joined; 3 a collective failed (its error is
// printed, then the process waits up to 3 s for the launcher's SIGTERM); 4 --die_at_rank was given but no collective failed.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "comm/init.h"
#include "comm/new_group.h"
#include "comm/process_group.h"
#include "base/check.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"
#include "testing/worker_env.h"

ABSL_FLAG(std::string, init_method, "env://",
          "env://, tcp://host:port or file:///path. With tcp:// and file:// rank 0 hosts the store "
          "itself even when ddprun runs one (DDP_STORE_IN_LAUNCHER is ignored).");
ABSL_FLAG(std::string, backend, "gloo", "auto, gloo or shm (InitOptions::backend).");
ABSL_FLAG(bool, large, false, "Also all-reduce (sum) one 64 MiB float32 tensor.");
ABSL_FLAG(int, corrupt_at_rank, -1,
          "Self-test of the checker: this rank perturbs its first non-empty all-reduce result before "
          "comparing it, so it must exit 1 naming AllReduce(sum).");
ABSL_FLAG(bool, comm_buffer, false,
          "All-reduce tensors from ProcessGroup::NewCommBuffer, as DDP's buckets (over shm: read in place from "
          "the ranks' shared heaps, Note [Zero-copy all-reduce]).");
ABSL_FLAG(int, die_at_rank, -1, "Failure test: this rank SIGKILLs itself during an all-reduce loop.");
ABSL_FLAG(int, die_after_ms, 1000, "Failure test: how long after joining the dying rank lives.");
ABSL_FLAG(int64_t, die_loop_floats, int64_t{4} << 20,
          "Failure test: float32 elements per all-reduce of the loop (default 16 MiB).");
ABSL_FLAG(bool, ignore_sigpipe, true,
          "Ignore SIGPIPE. Libgloo 0.5 writes to its sockets with writev, so a write to a peer that just "
          "died raises SIGPIPE and kills this rank silently instead of failing the collective; until "
          "comm/ ignores SIGPIPE itself (as CPython does for PyTorch), the worker does.");
ABSL_FLAG(double, die_loop_max_s, 60.0,
          "Failure test: give up (exit 4) when no collective failed after this many seconds.");

namespace ddp {
namespace {

constexpr int kExitMismatch = 1;
constexpr int kExitInit = 2;
constexpr int kExitCollectiveFailed = 3;
constexpr int kExitNoFailure = 4;

// Set by the SIGTERM handler (installed by the failure paths, see ExitAfterCollectiveFailure).
std::atomic<bool> g_got_sigterm{false};
void RecordSigterm(int) { g_got_sigterm.store(true); }

// A collective failed here, most likely because a peer died or failed first. Before exiting, wait
// (at most 3 s) for the launcher's SIGTERM: ddprun reaps workers in rank order every 20 ms and reports
// the first one it reaps as the cause, so exiting at once could make this rank look like the culprit.
[[noreturn]] void ExitAfterCollectiveFailure(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  signal(SIGTERM, RecordSigterm);
  const absl::Time give_up = absl::Now() + absl::Seconds(3);
  while (!g_got_sigterm.load() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(5));
  // The group's peers are gone: skip its teardown (nothing left to flush or release).
  std::_Exit(code);
}

// Rank `rank`'s input element i under `salt`: small integers, so sums, products (of up to 4 ranks),
// minima, maxima and averages are exact or rounded identically in any reduction order.
float Value(int rank, int64_t i, int salt) {
  return static_cast<float>((rank + 1 + salt) * (i % 7 + 1) - 3);
}

std::vector<float> Input(int rank, int64_t n, int salt) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = Value(rank, i, salt);
  return v;
}

Tensor InputTensor(int rank, int64_t n, int salt) { return FromVector(Input(rank, n, salt), {n}); }

// `values` in the tensor an all-reduce takes: itself, or a copy in group's NewCommBuffer (--comm_buffer).
Tensor AllReduceTensor(ProcessGroup& group, const Tensor& values) {
  if (!absl::GetFlag(FLAGS_comm_buffer)) return values;
  Tensor t = group.NewCommBuffer(values.numel(), values.dtype(), values.device());
  CopyInPlace(t, values);
  return t;
}

// The reduction over ranks 0..world-1 of Input(r + shift, n, salt), computed sequentially.
std::vector<float> Reference(int world, int64_t n, int salt, ReduceOp op, int shift = 0) {
  std::vector<float> out = Input(shift, n, salt);
  for (int r = 1; r < world; ++r) {
    for (int64_t i = 0; i < n; ++i) {
      const float x = Value(r + shift, i, salt);
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg:
          out[i] += x;
          break;
        case ReduceOp::kProduct:
          out[i] *= x;
          break;
        case ReduceOp::kMin:
          out[i] = std::min(out[i], x);
          break;
        case ReduceOp::kMax:
          out[i] = std::max(out[i], x);
          break;
      }
    }
  }
  if (op == ReduceOp::kAvg) {
    for (float& x : out) x /= static_cast<float>(world);
  }
  return out;
}

// Whether `group` implements Gather, Scatter, AllToAll, Send/Recv, MonitoredBarrier and NewGroup: Gloo,
// and the hierarchical group (which runs them on its flat Gloo group).
bool TakesMoreCollectives(const ProcessGroup& group) {
  return group.backend_name() == "gloo" || group.backend_name() == "hier(shm+gloo)";
}

// Runs the checks of one rank. Every method returns OK, a DataLoss error naming the first mismatch,
// or the collective's own error.
class CollectiveChecks {
 public:
  explicit CollectiveChecks(ProcessGroup& group)
      : group_(group), rank_(group.rank()), world_(group.size()), wait_(group.timeout() + absl::Seconds(30)) {}

  int checks_passed() const { return checks_passed_; }

  absl::Status RunAll(bool large) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1001}}) {
      DDP_RETURN_IF_ERROR(AllReduceEveryOp(n));
      DDP_RETURN_IF_ERROR(BroadcastFromRoots(n));
      DDP_RETURN_IF_ERROR(AllGather(n));
      DDP_RETURN_IF_ERROR(ReduceScatter(n, ReduceOp::kSum));
      DDP_RETURN_IF_ERROR(ReduceScatter(n, ReduceOp::kMax));
      DDP_RETURN_IF_ERROR(Reduce(n, world_ - 1, ReduceOp::kSum));
      DDP_RETURN_IF_ERROR(Reduce(n, 0, ReduceOp::kMin));
      DDP_RETURN_IF_ERROR(Run("Barrier", group_.Barrier()));
      DDP_RETURN_IF_ERROR(Objects(n));
      if (TakesMoreCollectives(group_)) DDP_RETURN_IF_ERROR(MoreCollectives(n));
    }
    if (large) DDP_RETURN_IF_ERROR(AllReduce(int64_t{16} << 20, ReduceOp::kSum, /*salt=*/1));
    return Run("Barrier (final)", group_.Barrier());
  }

 private:
  // Waits for `work` (bounded) and prefixes its error with `what`.
  absl::Status Run(const std::string& what, const std::shared_ptr<Work>& work) {
    absl::Status status = work->Wait(wait_);
    if (!status.ok()) return absl::Status(status.code(), absl::StrCat(what, ": ", status.message()));
    return absl::OkStatus();
  }

  // Compares `got` with `expected` element by element.
  absl::Status Expect(const std::string& what, const std::vector<float>& got,
                      const std::vector<float>& expected) {
    if (got.size() != expected.size()) {
      return absl::DataLossError(
          absl::StrCat("MISMATCH in ", what, ": ", got.size(), " elements, expected ", expected.size()));
    }
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i] != expected[i]) {
        return absl::DataLossError(absl::StrFormat("MISMATCH in %s on rank %d/%d: element %d is %g, expected %g",
                                                   what, rank_, world_, i, got[i], expected[i]));
      }
    }
    ++checks_passed_;
    return absl::OkStatus();
  }

  absl::Status AllReduce(int64_t n, ReduceOp op, int salt) {
    const std::string what = absl::StrCat("AllReduce(", ReduceOpName(op), ") n=", n);
    Tensor t = AllReduceTensor(group_, InputTensor(rank_, n, salt));
    DDP_RETURN_IF_ERROR(Run(what, group_.AllReduce(t, op)));
    std::vector<float> got = t.ToVector<float>();
    if (n > 0 && rank_ == absl::GetFlag(FLAGS_corrupt_at_rank)) got[n - 1] += 1.0f;
    return Expect(what, got, Reference(world_, n, salt, op));
  }

  absl::Status AllReduceEveryOp(int64_t n) {
    int salt = 0;
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
      DDP_RETURN_IF_ERROR(AllReduce(n, op, salt++ % 4));
    }
    return absl::OkStatus();
  }

  absl::Status BroadcastFromRoots(int64_t n) {
    for (int root : {0, world_ - 1}) {
      const std::string what = absl::StrCat("Broadcast(root ", root, ") n=", n);
      Tensor t = InputTensor(rank_, n, 2);
      DDP_RETURN_IF_ERROR(Run(what, group_.Broadcast(t, root)));
      DDP_RETURN_IF_ERROR(Expect(what, t.ToVector<float>(), Input(root, n, 2)));
    }
    return absl::OkStatus();
  }

  absl::Status AllGather(int64_t n) {
    const std::string what = absl::StrCat("AllGather n=", n);
    std::vector<Tensor> outputs;
    for (int r = 0; r < world_; ++r) outputs.push_back(Zeros({n}));
    DDP_RETURN_IF_ERROR(Run(what, group_.AllGather(outputs, InputTensor(rank_, n, 3))));
    for (int r = 0; r < world_; ++r) {
      DDP_RETURN_IF_ERROR(Expect(absl::StrCat(what, " (from rank ", r, ")"), outputs[r].ToVector<float>(),
                                 Input(r, n, 3)));
    }
    return absl::OkStatus();
  }

  // Rank q's c-th input chunk is Input(q + c); rank r receives the reduction over q of Input(q + r).
  absl::Status ReduceScatter(int64_t n, ReduceOp op) {
    const std::string what = absl::StrCat("ReduceScatter(", ReduceOpName(op), ") n=", n);
    std::vector<Tensor> inputs;
    for (int c = 0; c < world_; ++c) inputs.push_back(InputTensor(rank_ + c, n, 0));
    Tensor output = Zeros({n});
    DDP_RETURN_IF_ERROR(Run(what, group_.ReduceScatter(output, inputs, op)));
    return Expect(what, output.ToVector<float>(), Reference(world_, n, 0, op, /*shift=*/rank_));
  }

  // Gather, Scatter, AllToAll, Send/Recv and the rest of the ring ReduceScatter's ops (gloo only).
  absl::Status MoreCollectives(int64_t n) {
    for (ReduceOp op : {ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kProduct}) DDP_RETURN_IF_ERROR(ReduceScatter(n, op));
    const int root = world_ - 1;
    const std::string what_g = absl::StrCat("Gather(root ", root, ") n=", n);
    std::vector<Tensor> gathered;
    for (int r = 0; r < world_ && rank_ == root; ++r) gathered.push_back(Zeros({n}));
    DDP_RETURN_IF_ERROR(Run(what_g, group_.Gather(gathered, InputTensor(rank_, n, 5), root)));
    for (int r = 0; r < world_ && rank_ == root; ++r) {
      DDP_RETURN_IF_ERROR(Expect(absl::StrCat(what_g, " (from rank ", r, ")"), gathered[r].ToVector<float>(),
                                 Input(r, n, 5)));
    }
    const std::string what_s = absl::StrCat("Scatter(root 0) n=", n);
    std::vector<Tensor> pieces;
    for (int r = 0; r < world_ && rank_ == 0; ++r) pieces.push_back(InputTensor(10 + r, n, 6));
    Tensor piece = Zeros({n});
    DDP_RETURN_IF_ERROR(Run(what_s, group_.Scatter(piece, pieces, 0)));
    DDP_RETURN_IF_ERROR(Expect(what_s, piece.ToVector<float>(), Input(10 + rank_, n, 6)));
    const std::string what_a = absl::StrCat("AllToAll n=", n);
    std::vector<Tensor> inputs, outputs;
    for (int r = 0; r < world_; ++r) {
      inputs.push_back(InputTensor(10 * rank_ + r, n, 7));
      outputs.push_back(Zeros({n}));
    }
    DDP_RETURN_IF_ERROR(Run(what_a, group_.AllToAll(outputs, inputs)));
    for (int q = 0; q < world_; ++q) {
      DDP_RETURN_IF_ERROR(Expect(absl::StrCat(what_a, " (from rank ", q, ")"), outputs[q].ToVector<float>(),
                                 Input(10 * q + rank_, n, 7)));
    }
    if (world_ == 1) return absl::OkStatus();
    // Around the ring: every rank sends to the right before it receives from the left.
    const int right = (rank_ + 1) % world_, left = (rank_ + world_ - 1) % world_;
    const std::string what_p = absl::StrCat("Send/Recv (tag ", n, ") n=", n);
    Tensor received = Zeros({n});
    std::shared_ptr<Work> sent = group_.Send(InputTensor(rank_, n, 8), right, static_cast<int>(n));
    DDP_RETURN_IF_ERROR(Run(what_p, group_.Recv(received, left, static_cast<int>(n))));
    DDP_RETURN_IF_ERROR(Run(what_p, sent));
    return Expect(what_p, received.ToVector<float>(), Input(left, n, 8));
  }

  absl::Status Reduce(int64_t n, int root, ReduceOp op) {
    const std::string what = absl::StrCat("Reduce(", ReduceOpName(op), ", root ", root, ") n=", n);
    Tensor t = InputTensor(rank_, n, 1);
    DDP_RETURN_IF_ERROR(Run(what, group_.Reduce(t, root, op)));
    if (rank_ != root) return absl::OkStatus();  // Other ranks' tensors are unspecified.
    return Expect(what, t.ToVector<float>(), Reference(world_, n, 1, op));
  }

  // Byte strings whose length depends on `n` (and the rank), with embedded zero bytes.
  static std::string ObjectOf(int rank, int64_t n) {
    std::string s;
    for (int64_t i = 0; i < (n + rank * 5) % 97; ++i) s.push_back(static_cast<char>((i * 31 + rank) % 256));
    return s;
  }

  absl::Status Objects(int64_t n) {
    const int root = world_ - 1;
    std::string data = rank_ == root ? ObjectOf(root, n + 3) : "stale";
    const std::string what_b = absl::StrCat("BroadcastObject(root ", root, ") n=", n);
    absl::Status status = group_.BroadcastObject(&data, root);
    if (!status.ok()) return absl::Status(status.code(), absl::StrCat(what_b, ": ", status.message()));
    if (data != ObjectOf(root, n + 3)) {
      return absl::DataLossError(absl::StrCat("MISMATCH in ", what_b, " on rank ", rank_, ": got ",
                                              data.size(), " bytes"));
    }
    ++checks_passed_;
    std::vector<std::string> all;
    const std::string what_g = absl::StrCat("AllGatherObject n=", n);
    status = group_.AllGatherObject(ObjectOf(rank_, n), &all);
    if (!status.ok()) return absl::Status(status.code(), absl::StrCat(what_g, ": ", status.message()));
    if (static_cast<int>(all.size()) != world_) {
      return absl::DataLossError(absl::StrCat("MISMATCH in ", what_g, ": ", all.size(), " outputs"));
    }
    for (int r = 0; r < world_; ++r) {
      if (all[r] != ObjectOf(r, n)) {
        return absl::DataLossError(absl::StrCat("MISMATCH in ", what_g, " on rank ", rank_, ": object of rank ",
                                                r, " differs"));
      }
    }
    ++checks_passed_;
    return absl::OkStatus();
  }

  ProcessGroup& group_;
  const int rank_;
  const int world_;
  const absl::Duration wait_;
  int checks_passed_ = 0;
};

// NewGroup end to end (gloo, world >= 2): the odd ranks all-reduce over their subgroup while the even
// ranks exchange tensors pairwise (0 and 2) over the parent group; then every rank passes a
// MonitoredBarrier of the parent. Returns OK, a DataLoss error naming the mismatch, or the call's error.
absl::Status CheckSubgroup(DistributedContext& context) {
  ProcessGroup& parent = *context.group;
  const int rank = parent.rank(), world = parent.size();
  const absl::Duration wait = parent.timeout() + absl::Seconds(30);
  std::vector<int> odd;
  for (int r = 1; r < world; r += 2) odd.push_back(r);
  DDP_ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroup> sub, NewGroup(context, odd));
  const int64_t n = 1001;
  if (rank % 2 == 1) {
    if (sub == nullptr || sub->size() != static_cast<int>(odd.size()) || sub->rank() != rank / 2) {
      return absl::DataLossError(absl::StrCat("MISMATCH in NewGroup: rank ", rank, " is not rank ", rank / 2,
                                              " of a subgroup of ", odd.size()));
    }
    Tensor t = InputTensor(rank, n, 9);
    DDP_RETURN_IF_ERROR(sub->AllReduce(t)->Wait(wait));
    std::vector<float> expected(n, 0.0f);
    for (int r : odd) {
      for (int64_t i = 0; i < n; ++i) expected[i] += Value(r, i, 9);
    }
    if (t.ToVector<float>() != expected) {
      return absl::DataLossError(absl::StrCat("MISMATCH in the subgroup's AllReduce(sum) on rank ", rank));
    }
    DDP_RETURN_IF_ERROR(sub->Barrier()->Wait(wait));
  } else {
    if (sub != nullptr) return absl::DataLossError(absl::StrCat("MISMATCH in NewGroup: even rank ", rank, " is a member"));
    const int partner = rank ^ 2;
    if (partner < world) {
      Tensor received = Zeros({n});
      std::shared_ptr<Work> sent = parent.Send(InputTensor(rank, n, 10), partner, /*tag=*/42);
      DDP_RETURN_IF_ERROR(parent.Recv(received, partner, /*tag=*/42)->Wait(wait));
      DDP_RETURN_IF_ERROR(sent->Wait(wait));
      if (received.ToVector<float>() != Input(partner, n, 10)) {
        return absl::DataLossError(absl::StrCat("MISMATCH in Recv from rank ", partner, " on rank ", rank));
      }
    }
  }
  DDP_RETURN_IF_ERROR(parent.MonitoredBarrier(parent.timeout(), /*wait_all_ranks=*/true));
  std::printf("collective_worker rank %d/%d: subgroup [%s] checked\n", rank, world, absl::StrJoin(odd, ", ").c_str());
  return absl::OkStatus();
}

// Every rank all-reduces in a loop; rank `die_at_rank` SIGKILLs itself after `die_after`. Returns the
// exit code: kExitCollectiveFailed once a collective failed (the error is printed), kExitNoFailure
// when the loop ran out of time without one.
int RunFailureScenario(ProcessGroup& group, int die_at_rank, absl::Duration die_after) {
  const int rank = group.rank();
  // ddprun SIGTERMs the survivors as soon as it sees the dead rank; keep running until our own
  // collective reports the failure (bounded by the group timeout), so the error is printed.
  signal(SIGTERM, RecordSigterm);
  if (rank == die_at_rank) {
    std::thread([die_after] {
      absl::SleepFor(die_after);
      std::fprintf(stderr, "collective_worker: dying now (SIGKILL)\n");
      raise(SIGKILL);
    }).detach();
  }
  const int64_t n = absl::GetFlag(FLAGS_die_loop_floats);
  Tensor t = AllReduceTensor(group, Zeros({n}));
  const absl::Time give_up = absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_die_loop_max_s));
  int iterations = 0;
  absl::Time last_success = absl::Now();
  while (absl::Now() < give_up) {
    absl::Status status = group.AllReduce(t)->Wait(group.timeout() + absl::Seconds(10));
    if (!status.ok()) {
      std::fprintf(stderr, "collective_worker rank %d: collective failed after %d all-reduces%s (%.2f s after the "
                   "last success): %s\n", rank, iterations, g_got_sigterm.load() ? " (SIGTERM received meanwhile)" : "",
                   absl::ToDoubleSeconds(absl::Now() - last_success), std::string(status.message()).c_str());
      return kExitCollectiveFailed;
    }
    ++iterations;
    last_success = absl::Now();
  }
  std::fprintf(stderr, "collective_worker rank %d: no collective failed in %d all-reduces\n", rank, iterations);
  return kExitNoFailure;
}

int Main() {
  if (absl::GetFlag(FLAGS_ignore_sigpipe)) signal(SIGPIPE, SIG_IGN);
  InitOptions options;
  options.init_method = absl::GetFlag(FLAGS_init_method);
  options.backend = absl::GetFlag(FLAGS_backend);
  options.env = WorkerEnvForInitMethod(options.init_method);
  absl::StatusOr<std::unique_ptr<DistributedContext>> context = InitProcessGroup(options);
  if (!context.ok()) {
    std::fprintf(stderr, "collective_worker: cannot join the group (%s): %s\n", options.init_method.c_str(),
                 std::string(context.status().message()).c_str());
    return kExitInit;
  }
  ProcessGroup& group = *(*context)->group;
  const LaunchEnv& launch = (*context)->launch;
  std::printf("collective_worker rank %d/%d joined via %s (gloo address %s, timeout %s, backend %s)\n", group.rank(),
              group.size(), options.init_method.c_str(),
              options.env("GLOO_SOCKET_IFADDR").value_or(LocalAddressToward(launch.master_addr)).c_str(),
              absl::FormatDuration(group.timeout()).c_str(), group.backend_name().c_str());
  std::fflush(stdout);

  const int die_at_rank = absl::GetFlag(FLAGS_die_at_rank);
  if (die_at_rank >= 0) {
    const int code = RunFailureScenario(group, die_at_rank, absl::Milliseconds(absl::GetFlag(FLAGS_die_after_ms)));
    if (code == kExitCollectiveFailed) ExitAfterCollectiveFailure(code);
    std::fflush(stderr);
    std::_Exit(code);
  }

  CollectiveChecks checks(group);
  const absl::Time start = absl::Now();
  absl::Status status = checks.RunAll(absl::GetFlag(FLAGS_large));
  if (status.ok() && TakesMoreCollectives(group) && group.size() > 1) status = CheckSubgroup(**context);
  if (!status.ok()) {
    std::fprintf(stderr, "collective_worker rank %d: FAILED: %s\n", group.rank(),
                 std::string(status.message()).c_str());
    if (status.code() != absl::StatusCode::kDataLoss) ExitAfterCollectiveFailure(kExitCollectiveFailed);
    std::fflush(stderr);
    std::_Exit(kExitMismatch);  // This rank is the cause: exit at once.
  }
  std::printf("collective_worker rank %d/%d: all %d checks passed in %.2f s\n", group.rank(), group.size(),
              checks.checks_passed(), absl::ToDoubleSeconds(absl::Now() - start));
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace ddp

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return ddp::Main();
}
