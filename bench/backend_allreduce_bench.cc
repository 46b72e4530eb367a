// backend_allreduce_bench: median time of one float32 sum all-reduce per message size through
// InitProcessGroup's backend (gloo, shm, mpi or auto), under ddprun or mpirun:
//
//   ddprun --nproc_per_node=2 --master_port=0 bazel-bin/bench/backend_allreduce_bench --backend=shm
//   mpirun -np 2 --oversubscribe bazel-bin/bench/backend_allreduce_bench --backend=mpi   # OpenMPI's rows
//   mpirun -np 2 --oversubscribe -x MASTER_PORT=29511 bazel-bin/bench/backend_allreduce_bench --backend=shm
//
// (as root, mpirun needs OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 in its environment).
//
// With --backend=mpi a second column, raw_mpi_us, times a blocking MPI_Allreduce on MPI_COMM_WORLD from
// the calling thread with the same buffer and count (the anchor: what ProcessGroupMpi's worker thread,
// non-blocking MPI_Iallreduce and MPI_Test polling add or cost; Note [MPI worker thread]).
//
// --comm_buffer allocates the tensor as DDP allocates its buckets (ProcessGroup::NewCommBuffer).
//
// Per size: --warmup untimed calls, then calls until --target_ms passed (at least --min_iters; every
// rank runs rank 0's count, agreed by a broadcast), each call timed alone; rank 0 prints the median.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "base/statistics.h"
#include "comm/init.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

ABSL_FLAG(std::string, backend, "shm", "auto, gloo, shm or mpi (mpi: under mpirun).");
ABSL_FLAG(std::vector<std::string>, bytes, std::vector<std::string>({"4", "65536", "1048576", "2097152",
                                                                     "4194304", "67108864"}),
          "Message sizes in bytes (multiples of 4).");
ABSL_FLAG(bool, comm_buffer, false,
          "Allocate the tensor with ProcessGroup::NewCommBuffer, as DDP's buckets are (over shm: in the shared "
          "heap, read in place by the peers; Note [Zero-copy all-reduce]).");
ABSL_FLAG(int, warmup, 3, "Untimed calls per size.");
ABSL_FLAG(int, min_iters, 10, "Fewest timed calls per size.");
ABSL_FLAG(double, target_ms, 300.0, "Time to spend per size (rank 0's estimate from the warm-up).");

namespace ddp {
namespace {

double TimeOne(ProcessGroup& group, const Tensor& t) {
  const auto start = std::chrono::steady_clock::now();
  DDP_CHECK(group.AllReduce(t)->Wait(absl::Seconds(120)).ok()) << "all-reduce failed";
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// One blocking MPI_Allreduce (sum, in place) on MPI_COMM_WORLD; the group must be idle (MPI runs
// MPI_THREAD_SERIALIZED and the group's worker makes no MPI call while it has no work).
double TimeRawMpi(const Tensor& t) {
  const auto start = std::chrono::steady_clock::now();
  DDP_CHECK(MPI_Allreduce(MPI_IN_PLACE, t.raw_data(), static_cast<int>(t.numel()), MPI_FLOAT, MPI_SUM,
                          MPI_COMM_WORLD) == MPI_SUCCESS);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}


int Main() {
  InitOptions options;
  options.backend = absl::GetFlag(FLAGS_backend);
  auto context = InitProcessGroup(options);
  DDP_CHECK(context.ok()) << context.status();
  ProcessGroup& group = *(*context)->group;
  const bool raw_mpi = group.backend_name() == "mpi";
  if (group.rank() == 0) {
    std::printf("backend %s, world %d%s\n%12s %12s %12s %8s\n", group.backend_name().c_str(), group.size(),
                absl::GetFlag(FLAGS_comm_buffer) ? ", tensors from NewCommBuffer" : "", "bytes",
                "median_us", raw_mpi ? "raw_mpi_us" : "", "iters");
  }
  for (const std::string& text : absl::GetFlag(FLAGS_bytes)) {
    const int64_t bytes = std::stoll(text);
    Tensor t = Ones({bytes / 4});
    if (absl::GetFlag(FLAGS_comm_buffer)) {
      Tensor shared = group.NewCommBuffer(t.numel(), DType::kFloat32, Device::CPU());
      CopyInPlace(shared, t);
      t = shared;
    }
    double warm = 0;
    for (int i = 0; i < absl::GetFlag(FLAGS_warmup); ++i) warm = TimeOne(group, t);
    Tensor iters = FromVector(std::vector<float>{static_cast<float>(std::max<double>(
                                  absl::GetFlag(FLAGS_min_iters), absl::GetFlag(FLAGS_target_ms) / 1e3 / warm))},
                              {1});
    DDP_CHECK(group.Broadcast(iters, 0)->Wait(absl::Seconds(60)).ok());
    std::vector<double> seconds, raw_seconds;
    const int count = static_cast<int>(iters.ToVector<float>()[0]);
    for (int i = 0; i < count; ++i) seconds.push_back(TimeOne(group, t));
    for (int i = 0; raw_mpi && i < count; ++i) raw_seconds.push_back(TimeRawMpi(t));
    if (group.rank() == 0) {
      const std::string raw = raw_mpi ? absl::StrFormat("%.1f", Median(raw_seconds) * 1e6) : "";
      std::printf("%12lld %12.1f %12s %8d\n", static_cast<long long>(bytes), Median(seconds) * 1e6, raw.c_str(), count);
    }
  }
  return 0;
}

}  // namespace
}  // namespace ddp

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return ddp::Main();
}
