// Whether MPI's world is the job the launch environment describes: processes that a launcher started
// with WORLD_SIZE > 1 but that MPI sees as singletons (ddprun around --backend=mpi) would each train a
// model of their own and write the same files, so the mpi backend refuses them before any collective.
#ifndef DDP_COMM_MPI_MPI_LAUNCH_CHECK_H_
#define DDP_COMM_MPI_MPI_LAUNCH_CHECK_H_

#include "absl/status/status.h"
#include "store/launch_env.h"

namespace ddp {

// OK when `launch` (store/launch_env.h) says nothing (source "default") or agrees with MPI_COMM_WORLD's
// `mpi_rank` of `mpi_size`. Otherwise kFailedPrecondition naming both sides and the variables `launch`
// came from, e.g. "backend mpi: MPI says world size 1 (this is its rank 0), but WORLD_SIZE=2 and RANK=1
// (torchrun's variables, as ddprun sets them): ...", with what to do instead. Pure.
absl::Status CheckMpiMatchesLaunch(int mpi_rank, int mpi_size, const LaunchEnv& launch);

}  // namespace ddp

#endif  // DDP_COMM_MPI_MPI_LAUNCH_CHECK_H_
