#include "comm/mpi/mpi_launch_check.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace ddp {
namespace {

// The variables that carry rank and world size for `source` (ResolveLaunchEnv's sources).
struct SourceVariables {
  const char* rank;
  const char* size;
  const char* who;
};

SourceVariables VariablesOf(const std::string& source) {
  if (source == "openmpi") return {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OpenMPI's variables"};
  if (source == "slurm") return {"SLURM_PROCID", "SLURM_NTASKS", "Slurm's variables"};
  return {"RANK", "WORLD_SIZE", "torchrun's variables, as ddprun and Spawn set them"};
}

}  // namespace

absl::Status CheckMpiMatchesLaunch(int mpi_rank, int mpi_size, const LaunchEnv& launch) {
  if (launch.source == "default") return absl::OkStatus();
  if (launch.world_size == mpi_size && launch.rank == mpi_rank) return absl::OkStatus();
  const SourceVariables vars = VariablesOf(launch.source);
  std::string advice;
  if (mpi_size == 1 && launch.world_size > 1) {
    advice = absl::StrCat(": MPI did not start these processes together, so each would train alone. Start them with "
                          "mpirun -np ", launch.world_size, " (or srun), or keep the launcher and use --backend=auto, "
                          "gloo or shm");
  } else {
    advice = ": the launcher and MPI disagree on who this process is; start the job with one of them";
  }
  return absl::FailedPreconditionError(absl::StrCat("backend mpi: MPI says world size ", mpi_size, " (this is its rank ",
                                                    mpi_rank, "), but ", vars.size, "=", launch.world_size, " and ",
                                                    vars.rank, "=", launch.rank, " (", vars.who, ")", advice));
}

}  // namespace ddp
