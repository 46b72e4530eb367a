#include "comm/launch_env.h"

#include <gtest/gtest.h>

#include <map>

namespace ddp {
namespace {

EnvLookup Fake(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(LaunchEnvTest, TorchrunVariables) {
  auto env = ResolveLaunchEnv(Fake({{"RANK", "3"},
                                    {"WORLD_SIZE", "4"},
                                    {"LOCAL_RANK", "1"},
                                    {"LOCAL_WORLD_SIZE", "2"},
                                    {"MASTER_ADDR", "10.1.2.3"},
                                    {"MASTER_PORT", "1234"}}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->world_size, 4);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->local_world_size, 2);
  EXPECT_EQ(env->master_addr, "10.1.2.3");
  EXPECT_EQ(env->master_port, 1234);
  EXPECT_EQ(env->source, "torchrun");
}

TEST(LaunchEnvTest, OpenMpiAndSlurmWhenRankIsAbsent) {
  auto mpi = ResolveLaunchEnv(Fake({{"OMPI_COMM_WORLD_RANK", "1"},
                                    {"OMPI_COMM_WORLD_SIZE", "2"},
                                    {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                    {"SLURM_PROCID", "0"}}));
  ASSERT_TRUE(mpi.ok());
  EXPECT_EQ(mpi->source, "openmpi");
  EXPECT_EQ(mpi->rank, 1);
  auto slurm = ResolveLaunchEnv(Fake({{"SLURM_PROCID", "5"},
                                      {"SLURM_NTASKS", "8"},
                                      {"SLURM_LOCALID", "1"},
                                      {"SLURM_NTASKS_PER_NODE", "4"}}));
  ASSERT_TRUE(slurm.ok());
  EXPECT_EQ(slurm->source, "slurm");
  EXPECT_EQ(slurm->rank, 5);
  EXPECT_EQ(slurm->local_world_size, 4);
}

TEST(LaunchEnvTest, NothingSetMeansOneProcess) {
  auto env = ResolveLaunchEnv(Fake({}));
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(env->world_size, 1);
  EXPECT_EQ(env->source, "default");
}

TEST(LaunchEnvTest, ErrorsNameTheVariable) {
  auto missing = ResolveLaunchEnv(Fake({{"RANK", "0"}}));
  EXPECT_NE(missing.status().message().find("WORLD_SIZE is not set"), std::string::npos) << missing.status();
  auto bad = ResolveLaunchEnv(Fake({{"RANK", "x"}, {"WORLD_SIZE", "2"}}));
  EXPECT_NE(bad.status().message().find("RANK=\"x\""), std::string::npos) << bad.status();
  auto range = ResolveLaunchEnv(Fake({{"RANK", "2"}, {"WORLD_SIZE", "2"}}));
  EXPECT_NE(range.status().message().find("RANK=2 is not below WORLD_SIZE=2"), std::string::npos);
  auto contradiction = ResolveLaunchEnv(Fake({{"RANK", "1"}, {"WORLD_SIZE", "2"}}), 0, 2);
  EXPECT_NE(contradiction.status().message().find("rank argument 0 contradicts"), std::string::npos);
  auto port = ResolveLaunchEnv(Fake({{"MASTER_PORT", "70000"}}));
  EXPECT_NE(port.status().message().find("MASTER_PORT=70000"), std::string::npos);
}

TEST(LaunchEnvTest, TimeoutFromEnvironment) {
  EXPECT_EQ(*ResolveTimeout(Fake({})), absl::Seconds(300));
  EXPECT_EQ(*ResolveTimeout(Fake({{"DDP_TIMEOUT_S", "2.5"}})), absl::Seconds(2.5));
  EXPECT_FALSE(ResolveTimeout(Fake({{"DDP_TIMEOUT_S", "-1"}})).ok());
  EXPECT_EQ(*ResolveFailureReportWindow(Fake({})), absl::Seconds(3));
  EXPECT_EQ(*ResolveFailureReportWindow(Fake({{"DDP_FAILURE_REPORT_WINDOW_S", "0"}})), absl::ZeroDuration());
  EXPECT_NE(ResolveFailureReportWindow(Fake({{"DDP_FAILURE_REPORT_WINDOW_S", "soon"}})).status().message().find(
                "DDP_FAILURE_REPORT_WINDOW_S=\"soon\" is not a non-negative number of seconds"),
            std::string::npos);
}

}  // namespace
}  // namespace ddp
