// mpi_collective_worker: the end-to-end check of ProcessGroupMpi, run under a real mpirun
// (tests/mpi_collectives_test.sh).
// Each rank joins with InitProcessGroup(backend "mpi"), checks that rank and size equal mpirun's
// OMPI_COMM_WORLD_RANK/SIZE, then runs every collective (all-reduce with every op and dtype, broadcast
// from every root, all-gather, reduce-scatter, reduce, barrier, the object collectives, and a burst of
// all-reduces issued before any is waited on) and compares each result with a sequential reference it
// computes itself: every rank's input is a pure function of (rank, element, salt), so each rank knows
// all of them.
//
//   OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 2 --oversubscribe
//     bazel-bin/tests/mpi_collective_worker [--timeout_check]
//
// --timeout_check: DDP_TIMEOUT_S should be short (the test gives 5 s: long enough for the join on a loaded
// machine, which the same timeout bounds). Rank 0 enters a barrier no other rank joins; it
// must fail within the timeout naming "Barrier" and "rank 0/", and a later all-reduce must fail at once
// ("the group failed before"); rank 0 then prints "TIMEOUT CHECK PASSED" and exits, and its exit
// handler ends the job with MPI_Abort (Note [Stuck MPI operations]).
//
// --corrupt_at_rank=R: the checker's self-test (rank R perturbs one all-reduce result; it must exit 1).
//
// Exit codes: 0 every check passed ("MPI CHECKS PASSED rank r/n" printed); 1 a result differed (the message
// names the collective, dtype, size and element); 2 the group could not be joined; 3 a collective failed.
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "comm/init.h"
#include "comm/process_group.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

ABSL_FLAG(bool, timeout_check, false, "Check the timeout path instead (see the top of the file).");
ABSL_FLAG(int, corrupt_at_rank, -1,
          "Self-test of the checker: this rank perturbs its first non-empty all-reduce result before comparing "
          "it, so it must exit 1 printing \"MISMATCH AllReduce(sum)\".");

namespace ddp {
namespace {

int g_failures = 0;

// A small integer in [-4, 4]: sums of 4 ranks and products of 4 ranks are exact in every dtype.
double InputValue(int rank, int64_t i, int salt) {
  return static_cast<double>((rank * 31 + i * 7 + salt * 13) % 9) - 4;
}

void SetElement(const Tensor& t, int64_t i, double v) {
  switch (t.dtype()) {
    case DType::kFloat32: t.data<float>()[i] = static_cast<float>(v); break;
    case DType::kInt64: t.data<int64_t>()[i] = static_cast<int64_t>(v); break;
    case DType::kFloat16: static_cast<uint16_t*>(t.raw_data())[i] = FloatToHalf(static_cast<float>(v)); break;
    case DType::kBFloat16: static_cast<uint16_t*>(t.raw_data())[i] = FloatToBFloat16(static_cast<float>(v)); break;
  }
}

double GetElement(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kFloat32: return t.data<float>()[i];
    case DType::kInt64: return static_cast<double>(t.data<int64_t>()[i]);
    case DType::kFloat16: return HalfToFloat(static_cast<const uint16_t*>(t.raw_data())[i]);
    case DType::kBFloat16: return BFloat16ToFloat(static_cast<const uint16_t*>(t.raw_data())[i]);
  }
  return 0;
}

Tensor Input(int64_t n, DType dtype, int rank, int salt) {
  Tensor t = Tensor::Empty({n}, dtype);
  for (int64_t i = 0; i < n; ++i) SetElement(t, i, InputValue(rank, i, salt));
  return t;
}

// op over ranks 0..size-1 of InputValue(r, i, salt); kAvg divides (floor for int64, as DivideInPlace).
double Reference(ReduceOp op, DType dtype, int size, int64_t i, int salt) {
  double acc = InputValue(0, i, salt);
  for (int r = 1; r < size; ++r) {
    const double v = InputValue(r, i, salt);
    switch (op) {
      case ReduceOp::kSum: case ReduceOp::kAvg: acc += v; break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
      case ReduceOp::kProduct: acc *= v; break;
    }
  }
  if (op == ReduceOp::kAvg) acc = dtype == DType::kInt64 ? std::floor(acc / size) : acc / size;
  return acc;
}

// Compares every element of `got` with `want(i)`; half types round (a quotient) to 3 significant digits.
template <typename Want>
void Expect(const std::string& what, const Tensor& got, Want want) {
  const bool half = got.dtype() == DType::kFloat16 || got.dtype() == DType::kBFloat16;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double w = want(i);
    const double tolerance = half ? 1e-2 * std::max(1.0, std::fabs(w)) : 1e-6 * std::max(1.0, std::fabs(w));
    if (std::fabs(GetElement(got, i) - w) > tolerance) {
      std::fprintf(stderr, "MISMATCH %s of %lld %s: element %lld is %g, expected %g\n", what.c_str(),
                   static_cast<long long>(got.numel()), DTypeName(got.dtype()).c_str(), static_cast<long long>(i),
                   GetElement(got, i), w);
      ++g_failures;
      return;
    }
  }
}

// Waits for `work`; a failed collective ends the process with exit code 3.
void MustSucceed(const std::string& what, ProcessGroup& group, const std::shared_ptr<Work>& work) {
  absl::Status status = work->Wait(group.timeout());
  if (!status.ok()) {
    std::fprintf(stderr, "%s failed: %s\n", what.c_str(), status.ToString().c_str());
    std::exit(3);
  }
}

const std::vector<DType> kDTypes = {DType::kFloat32, DType::kInt64, DType::kFloat16, DType::kBFloat16};
const std::vector<ReduceOp> kOps = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax,
                                    ReduceOp::kProduct};
const std::vector<int64_t> kCounts = {0, 1, 1001, 70000};

void CheckAllReduce(ProcessGroup& g) {
  int salt = 0;
  for (DType dtype : kDTypes) {
    for (ReduceOp op : kOps) {
      for (int64_t n : kCounts) {
        ++salt;
        Tensor t = Input(n, dtype, g.rank(), salt);
        const std::string what = absl::StrCat("AllReduce(", ReduceOpName(op), ")");
        MustSucceed(what, g, g.AllReduce(t, op));
        if (n > 0 && salt == 2 && g.rank() == absl::GetFlag(FLAGS_corrupt_at_rank)) SetElement(t, n - 1, 1000);
        Expect(what, t, [&](int64_t i) { return Reference(op, dtype, g.size(), i, salt); });
      }
    }
  }
}

void CheckBroadcastAndReduce(ProcessGroup& g) {
  int salt = 100;
  for (DType dtype : kDTypes) {
    for (int64_t n : kCounts) {
      for (int root = 0; root < g.size(); ++root) {
        ++salt;
        Tensor t = Input(n, dtype, g.rank(), salt);
        MustSucceed("Broadcast", g, g.Broadcast(t, root));
        Expect(absl::StrCat("Broadcast(root ", root, ")"), t, [&](int64_t i) { return InputValue(root, i, salt); });
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg}) {
          Tensor r = Input(n, dtype, g.rank(), salt);
          MustSucceed("Reduce", g, g.Reduce(r, root, op));
          if (g.rank() != root) continue;
          Expect(absl::StrCat("Reduce(", ReduceOpName(op), ", root ", root, ")"), r,
                 [&](int64_t i) { return Reference(op, dtype, g.size(), i, salt); });
        }
      }
    }
  }
}

void CheckGatherAndScatter(ProcessGroup& g) {
  int salt = 1000;
  for (DType dtype : kDTypes) {
    for (int64_t n : kCounts) {
      ++salt;
      std::vector<Tensor> outputs;
      for (int q = 0; q < g.size(); ++q) outputs.push_back(Tensor::Empty({n}, dtype));
      MustSucceed("AllGather", g, g.AllGather(outputs, Input(n, dtype, g.rank(), salt)));
      for (int q = 0; q < g.size(); ++q) {
        Expect(absl::StrCat("AllGather (from rank ", q, ")"), outputs[q],
               [&](int64_t i) { return InputValue(q, i, salt); });
      }
      for (ReduceOp op : kOps) {
        // inputs[c] of rank r holds InputValue(r, c * n + i): destination c's part of a long vector.
        std::vector<Tensor> inputs;
        for (int c = 0; c < g.size(); ++c) {
          Tensor in = Tensor::Empty({n}, dtype);
          for (int64_t i = 0; i < n; ++i) SetElement(in, i, InputValue(g.rank(), c * n + i, salt));
          inputs.push_back(in);
        }
        Tensor output = Tensor::Empty({n}, dtype);
        const std::string what = absl::StrCat("ReduceScatter(", ReduceOpName(op), ")");
        MustSucceed(what, g, g.ReduceScatter(output, inputs, op));
        Expect(what, output, [&](int64_t i) { return Reference(op, dtype, g.size(), g.rank() * n + i, salt); });
      }
    }
  }
}

// Twenty all-reduces issued before any is waited on: each completes with its own result.
void CheckBurstInIssueOrder(ProcessGroup& g) {
  std::vector<Tensor> tensors;
  std::vector<std::shared_ptr<Work>> works;
  for (int k = 0; k < 20; ++k) {
    tensors.push_back(Input(257 * (k + 1), DType::kFloat32, g.rank(), 5000 + k));
    works.push_back(g.AllReduce(tensors.back(), ReduceOp::kSum));
  }
  for (int k = 0; k < 20; ++k) {
    MustSucceed("burst AllReduce", g, works[k]);
    Expect(absl::StrCat("burst AllReduce #", k), tensors[k],
           [&](int64_t i) { return Reference(ReduceOp::kSum, DType::kFloat32, g.size(), i, 5000 + k); });
  }
}

void CheckObjectsAndBarrier(ProcessGroup& g) {
  MustSucceed("Barrier", g, g.Barrier());
  for (int root = 0; root < g.size(); ++root) {
    std::string data = g.rank() == root ? std::string(1000 + root * 37, static_cast<char>('a' + root)) : "x";
    if (absl::Status s = g.BroadcastObject(&data, root); !s.ok()) {
      std::fprintf(stderr, "BroadcastObject failed: %s\n", s.ToString().c_str());
      std::exit(3);
    }
    if (data != std::string(1000 + root * 37, static_cast<char>('a' + root))) {
      std::fprintf(stderr, "MISMATCH BroadcastObject(root %d): got %zu bytes\n", root, data.size());
      ++g_failures;
    }
  }
  std::vector<std::string> gathered;
  if (absl::Status s = g.AllGatherObject(absl::StrCat("rank ", g.rank(), std::string(g.rank() * 11, '!')), &gathered);
      !s.ok()) {
    std::fprintf(stderr, "AllGatherObject failed: %s\n", s.ToString().c_str());
    std::exit(3);
  }
  for (int q = 0; q < g.size(); ++q) {
    if (q >= static_cast<int>(gathered.size()) || gathered[q] != absl::StrCat("rank ", q, std::string(q * 11, '!'))) {
      std::fprintf(stderr, "MISMATCH AllGatherObject: entry %d\n", q);
      ++g_failures;
    }
  }
}

// Rank 0 waits in a barrier nobody else joins (see the top of the file).
int TimeoutCheck(ProcessGroup& g) {
  if (g.rank() != 0) {
    sleep(20);  // mpirun ends this rank once rank 0 aborts the job
    return 0;
  }
  const absl::Time start = absl::Now();
  absl::Status barrier = g.Barrier()->Wait(g.timeout() + absl::Seconds(30));
  std::fprintf(stderr, "barrier: %s (after %s)\n", barrier.ToString().c_str(),
               absl::FormatDuration(absl::Now() - start).c_str());
  if (!absl::IsDeadlineExceeded(barrier) || barrier.message().find("Barrier") == std::string::npos ||
      barrier.message().find("rank 0/") == std::string::npos) {
    return 1;
  }
  const absl::Time later = absl::Now();
  absl::Status next = g.AllReduce(Input(10, DType::kFloat32, 0, 0))->Wait(g.timeout());
  std::fprintf(stderr, "next: %s\n", next.ToString().c_str());
  if (next.ok() || next.message().find("the group failed before") == std::string::npos ||
      absl::Now() - later > absl::Seconds(1)) {
    return 1;
  }
  std::printf("TIMEOUT CHECK PASSED\n");
  std::fflush(stdout);
  return 0;
}

int Main() {
  InitOptions options;
  options.backend = "mpi";
  absl::StatusOr<std::unique_ptr<DistributedContext>> context = InitProcessGroup(options);
  if (!context.ok()) {
    std::fprintf(stderr, "join failed: %s\n", context.status().ToString().c_str());
    return 2;
  }
  ProcessGroup& g = *(*context)->group;
  if (absl::GetFlag(FLAGS_timeout_check)) return TimeoutCheck(g);
  const char* env_rank = std::getenv("OMPI_COMM_WORLD_RANK");
  const char* env_size = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (env_rank == nullptr || env_size == nullptr || std::atoi(env_rank) != g.rank() ||
      std::atoi(env_size) != g.size() || g.backend_name() != "mpi") {
    std::fprintf(stderr, "MISMATCH rank/size %d/%d vs mpirun's %s/%s\n", g.rank(), g.size(),
                 env_rank ? env_rank : "unset", env_size ? env_size : "unset");
    ++g_failures;
  }
  CheckAllReduce(g);
  CheckBroadcastAndReduce(g);
  CheckGatherAndScatter(g);
  CheckBurstInIssueOrder(g);
  CheckObjectsAndBarrier(g);
  if (g_failures > 0) return 1;
  std::printf("MPI CHECKS PASSED rank %d/%d\n", g.rank(), g.size());
  return 0;
}

}  // namespace
}  // namespace ddp

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return ddp::Main();
}
