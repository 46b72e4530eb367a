// CheckMpiMatchesLaunch: ddprun's WORLD_SIZE around MPI singletons is refused naming both; mpirun's and
// srun's own variables agree; a process started by hand checks nothing.
#include "comm/mpi/mpi_launch_check.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;

LaunchEnv Launch(const std::string& source, int rank, int world_size) {
  LaunchEnv launch;
  launch.source = source;
  launch.rank = rank;
  launch.world_size = world_size;
  return launch;
}

TEST(MpiLaunchCheckTest, SingletonsUnderALauncherAreRefusedNamingBothSizes) {
  const absl::Status status = CheckMpiMatchesLaunch(0, 1, Launch("torchrun", 1, 2));
  EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("MPI says world size 1 (this is its rank 0), but WORLD_SIZE=2 and RANK=1"));
  EXPECT_THAT(status.message(), HasSubstr("mpirun -np 2"));
  EXPECT_THAT(status.message(), HasSubstr("--backend=auto"));
}

TEST(MpiLaunchCheckTest, AgreementPassesAndNothingSetChecksNothing) {
  EXPECT_TRUE(CheckMpiMatchesLaunch(1, 2, Launch("openmpi", 1, 2)).ok());
  EXPECT_TRUE(CheckMpiMatchesLaunch(3, 4, Launch("slurm", 3, 4)).ok());
  EXPECT_TRUE(CheckMpiMatchesLaunch(0, 1, Launch("torchrun", 0, 1)).ok());
  EXPECT_TRUE(CheckMpiMatchesLaunch(2, 4, Launch("default", 0, 1)).ok());
}

TEST(MpiLaunchCheckTest, AnyOtherDisagreementNamesTheSourcesVariables) {
  const absl::Status size = CheckMpiMatchesLaunch(0, 4, Launch("slurm", 0, 2));
  EXPECT_TRUE(absl::IsFailedPrecondition(size)) << size;
  EXPECT_THAT(size.message(), HasSubstr("MPI says world size 4"));
  EXPECT_THAT(size.message(), HasSubstr("SLURM_NTASKS=2 and SLURM_PROCID=0"));
  const absl::Status rank = CheckMpiMatchesLaunch(1, 2, Launch("openmpi", 0, 2));
  EXPECT_THAT(rank.message(), HasSubstr("OMPI_COMM_WORLD_SIZE=2 and OMPI_COMM_WORLD_RANK=0"));
}

}  // namespace
}  // namespace ddp
