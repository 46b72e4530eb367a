// ProcessGroupMpi: the CPU backend over Debian's OpenMPI, for jobs started with `mpirun` or `srun
// --mpi=pmix`. Rank and size come from MPI itself (MPI_COMM_WORLD), not from a store. InitProcessGroup
// builds it for backend "mpi" (train/train --backend=mpi). Design: Note [MPI worker thread] and
// Note [Stuck MPI operations] in comm/mpi/process_group_mpi.cc.
//
// Running as root: OpenMPI refuses unless OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
// are set in mpirun's environment (tests/mpi_collectives_test.sh, docs/backends.md); this library never
// sets them.
#ifndef DDP_COMM_MPI_PROCESS_GROUP_MPI_H_
#define DDP_COMM_MPI_PROCESS_GROUP_MPI_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/queued_process_group.h"
#include "store/launch_env.h"

namespace ddp {

struct ProcessGroupMpiOptions {
  // Bound on joining (duplicating MPI_COMM_WORLD) and on every collective.
  absl::Duration timeout = absl::Seconds(300);
  // How long a wait polls MPI_Test without yielding the core before it starts to yield between polls
  // (OpenMPI makes progress only inside MPI calls, so the first microseconds are spun).
  absl::Duration spin_before_yield = absl::Microseconds(200);
  // After this long a wait sleeps 50 us between polls instead of yielding: a peer is late (still
  // computing), not data moving.
  absl::Duration yield_before_sleep = absl::Seconds(1);
  // Who the launch environment says this process is (InitProcessGroup passes its LaunchEnv). Create
  // refuses a mismatch with MPI_COMM_WORLD before joining (comm/mpi/mpi_launch_check.h); the default
  // (source "default") checks nothing.
  LaunchEnv launch;
};

// Collectives on contiguous CPU tensors (float32 and int64 through MPI's own reductions; float16 and
// bfloat16 through user-defined MPI operations; sum, avg, min, max, product) among the processes of
// MPI_COMM_WORLD. One background worker runs the collectives in issue order through non-blocking MPI
// calls, so every call returns at once with a Work. Thread-safe; several groups may coexist.
// Errors: a failed or timed-out collective's Work names the collective (operation, element count, dtype,
// sequence number, rank); the group is then broken and later collectives fail at once with that error.
// A timed-out operation cannot be cancelled (Note [Stuck MPI operations]): the process then ends with
// MPI_Abort instead of MPI_Finalize, which also ends the other ranks of the job.
class ProcessGroupMpi : public QueuedProcessGroup {
 public:
  // Initialises MPI once per process (MPI_Init_thread with MPI_THREAD_SERIALIZED; MPI_Finalize runs at
  // exit), then duplicates MPI_COMM_WORLD for this group, which waits for every rank. Fails with
  // kFailedPrecondition when MPI cannot be initialised or gives less than MPI_THREAD_SERIALIZED, and
  // with kDeadlineExceeded when some rank does not join within options.timeout, and with
  // kFailedPrecondition naming both when options.launch contradicts MPI's rank or world size (e.g.
  // WORLD_SIZE=2 from ddprun around processes MPI sees as two singletons). Thread-safe.
  static absl::StatusOr<std::unique_ptr<ProcessGroupMpi>> Create(const ProcessGroupMpiOptions& options = {});
  // Pending works fail with "process group destroyed"; the running one finishes (bounded) first. Frees
  // the communicator unless an operation on it is stuck.
  ~ProcessGroupMpi() override;

  // This process's rank among the ranks of its host (MPI_COMM_TYPE_SHARED), and how many there are.
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }

 private:
  // MPI_Comm is an int or a pointer depending on the MPI; the .cc keeps it behind this opaque holder so
  // that mpi.h stays out of this header.
  struct Comm;

  ProcessGroupMpi(std::unique_ptr<Comm> comm, int rank, int size, int local_rank, int local_size,
                  ProcessGroupMpiOptions options);

  // The collectives (arguments checked by QueuedProcessGroup): each queues its Run* below.
  std::shared_ptr<Work> IssueAllReduce(const CollectiveSpec& spec, const Tensor& tensor, ReduceOp op) override;
  std::shared_ptr<Work> IssueBroadcast(const CollectiveSpec& spec, const Tensor& tensor, int root) override;
  std::shared_ptr<Work> IssueAllGather(const CollectiveSpec& spec, const std::vector<Tensor>& outputs,
                                       const Tensor& input) override;
  std::shared_ptr<Work> IssueReduceScatter(const CollectiveSpec& spec, const Tensor& output,
                                           const std::vector<Tensor>& inputs, ReduceOp op) override;
  std::shared_ptr<Work> IssueReduce(const CollectiveSpec& spec, const Tensor& tensor, int root, ReduceOp op) override;
  std::shared_ptr<Work> IssueBarrier(const CollectiveSpec& spec) override;
  // A timed-out operation is stuck for good (Note [Stuck MPI operations]): the communicator is never freed.
  void OnFailure(const absl::Status& failure) override;

  // Worker-thread bodies of the collectives. An operation that times out keeps the buffers MPI may still
  // write alive for ever (Note [Stuck MPI operations]).
  absl::Status RunAllReduce(const Tensor& tensor, ReduceOp op, const RunningCall& call);
  absl::Status RunBroadcast(const Tensor& tensor, int root, const RunningCall& call);
  absl::Status RunAllGather(const std::vector<Tensor>& outputs, const Tensor& input, const RunningCall& call);
  absl::Status RunReduceScatter(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op,
                                const RunningCall& call);
  absl::Status RunReduce(const Tensor& tensor, int root, ReduceOp op, const RunningCall& call);
  absl::Status RunBarrier(const RunningCall& call);

  std::unique_ptr<Comm> comm_;
  const int local_rank_;
  const int local_size_;
  const ProcessGroupMpiOptions options_;
};

}  // namespace ddp

#endif  // DDP_COMM_MPI_PROCESS_GROUP_MPI_H_
