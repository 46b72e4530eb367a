#include "store/launch_env.h"

#include <gtest/gtest.h>

#include <map>

#include "store/scheduler_env.h"
#include "gmock/gmock.h"

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

// Note [The launch environment]: what a launcher writes is what a worker reads, field for field.
TEST(LaunchEnvTest, WrittenVariablesReadBackAsTheSameLaunchEnv) {
  LaunchEnv written;
  written.rank = 5;
  written.world_size = 6;
  written.local_rank = 1;
  written.local_world_size = 2;
  written.master_addr = "10.0.0.7";
  written.master_port = 31000;
  written.store_addr = "10.0.0.7";
  written.store_port = 29400;
  written.source = "torchrun";
  written.restart_count = 3;
  for (const bool in_launcher : {false, true}) {
    written.store_in_launcher = in_launcher;
    written.job_id = in_launcher ? "job-7f3a" : "";
    absl::StatusOr<LaunchEnv> read = ResolveLaunchEnv(Fake(LaunchEnvVariables(written)));
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(read->rank, written.rank);
    EXPECT_EQ(read->world_size, written.world_size);
    EXPECT_EQ(read->local_rank, written.local_rank);
    EXPECT_EQ(read->local_world_size, written.local_world_size);
    EXPECT_EQ(read->master_addr, written.master_addr);
    EXPECT_EQ(read->master_port, written.master_port);
    EXPECT_EQ(read->store_addr, written.store_addr);
    EXPECT_EQ(read->store_port, written.store_port);
    EXPECT_EQ(read->source, written.source);
    EXPECT_EQ(read->restart_count, written.restart_count);
    EXPECT_EQ(read->store_in_launcher, in_launcher);
    EXPECT_EQ(read->job_id, written.job_id);
  }
}

// The restart count: ours, else torchrun's, else 0; a value that is not a count is named.
TEST(LaunchEnvTest, RestartCount) {
  const std::map<std::string, std::string> ranks = {{"RANK", "0"}, {"WORLD_SIZE", "1"}};
  auto with = [&](std::map<std::string, std::string> extra) {
    extra.insert(ranks.begin(), ranks.end());
    return ResolveLaunchEnv(Fake(extra));
  };
  EXPECT_EQ(with({})->restart_count, 0);
  EXPECT_EQ(with({{"TORCHELASTIC_RESTART_COUNT", "2"}})->restart_count, 2);
  EXPECT_EQ(with({{"TORCHELASTIC_RESTART_COUNT", "2"}, {"DDP_RESTART_COUNT", "4"}})->restart_count, 4);
  absl::StatusOr<LaunchEnv> bad = with({{"DDP_RESTART_COUNT", "x"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), ::testing::HasSubstr("DDP_RESTART_COUNT=\"x\""));
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

TEST(LaunchEnvTest, DdprunStoreAddressIsPreferredForTheStore) {
  auto env = ResolveLaunchEnv(Fake({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.0.0.1"},
                                    {"MASTER_PORT", "1234"}}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->store_addr, "10.0.0.1");
  EXPECT_EQ(env->store_port, 1234);
  env = ResolveLaunchEnv(Fake({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.0.0.1"},
                               {"MASTER_PORT", "1234"}, {"DDP_STORE_ADDR", "10.0.0.2"}, {"DDP_STORE_PORT", "29400"}}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->master_port, 1234);
  EXPECT_EQ(env->store_addr, "10.0.0.2");
  EXPECT_EQ(env->store_port, 29400);
  EXPECT_EQ(ResolveLaunchEnv(Fake({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"DDP_STORE_PORT", "0"}})).status().message(),
            "DDP_STORE_PORT=0 is not a TCP port");
}

TEST(LaunchEnvTest, MasterAddrFromMpirunsHost) {
  std::map<std::string, std::string> vars = {
      {"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_MCA_orte_num_nodes", "2"},
      {"OMPI_MCA_orte_hnp_uri", "461307904.0;tcp://10.0.0.5,192.168.1.5:43541;tcp6://[fd00::2]:55791"}};
  EXPECT_EQ(ResolveLaunchEnv(Fake(vars))->master_addr, "10.0.0.5");
  vars["OMPI_MCA_orte_num_nodes"] = "1";
  EXPECT_EQ(ResolveLaunchEnv(Fake(vars))->master_addr, "127.0.0.1");
  vars["MASTER_ADDR"] = "host0";  // an exported MASTER_ADDR wins
  EXPECT_EQ(ResolveLaunchEnv(Fake(vars))->master_addr, "host0");
}

TEST(LaunchEnvTest, SlurmMasterAddrAndCompressedTasksPerNode) {
  std::map<std::string, std::string> vars = {
      {"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "7"}, {"SLURM_LOCALID", "1"}, {"SLURM_NODEID", "1"},
      {"SLURM_NNODES", "4"}, {"SLURM_JOB_NODELIST", "gpu[07-09,12]"}, {"SLURM_TASKS_PER_NODE", "2(x3),1"}};
  auto env = ResolveLaunchEnv(Fake(vars));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->master_addr, "gpu07");
  EXPECT_EQ(env->local_world_size, 2);
  vars["SLURM_STEP_NODELIST"] = "gpu[08-09]";  // the step's first node runs rank 0
  vars["SLURM_NODEID"] = "3";
  vars["SLURM_LOCALID"] = "0";
  env = ResolveLaunchEnv(Fake(vars));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->master_addr, "gpu08");
  EXPECT_EQ(env->local_world_size, 1);
  vars["SLURM_NTASKS_PER_NODE"] = "2";  // --ntasks-per-node: one count for every node
  EXPECT_EQ(ResolveLaunchEnv(Fake(vars))->local_world_size, 2);
  vars["SLURM_NNODES"] = "1";
  EXPECT_EQ(ResolveLaunchEnv(Fake(vars))->master_addr, "127.0.0.1");
  vars["SLURM_NTASKS_PER_NODE"] = "2(x";
  EXPECT_THAT(std::string(ResolveLaunchEnv(Fake(vars)).status().message()),
              ::testing::HasSubstr("Slurm tasks per node \"2(x\""));
}

TEST(SchedulerEnvTest, ExpandsSlurmNodeLists) {
  using ::testing::ElementsAre;
  EXPECT_THAT(*ExpandSlurmNodeList("node[01-04,07]"), ElementsAre("node01", "node02", "node03", "node04", "node07"));
  EXPECT_THAT(*ExpandSlurmNodeList("a1,b[8-10],c"), ElementsAre("a1", "b8", "b9", "b10", "c"));
  EXPECT_THAT(*ExpandSlurmNodeList("r[1-2]n[09-10]"), ElementsAre("r1n09", "r1n10", "r2n09", "r2n10"));
  EXPECT_THAT(*ExpandSlurmNodeList("x[5]-ib"), ElementsAre("x5-ib"));
  EXPECT_THAT(*ExpandSlurmNodeList("host"), ElementsAre("host"));
  for (const char* bad : {"", "node[1-", "node]1[", "node[4-2]", "node[a-b]", "a,,b", "n[0-99999999]"}) {
    EXPECT_EQ(ExpandSlurmNodeList(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(SchedulerEnvTest, ExpandsSlurmTasksPerNode) {
  using ::testing::ElementsAre;
  EXPECT_THAT(*ExpandSlurmTasksPerNode("2(x3),1"), ElementsAre(2, 2, 2, 1));
  EXPECT_THAT(*ExpandSlurmTasksPerNode("4"), ElementsAre(4));
  EXPECT_THAT(*ExpandSlurmTasksPerNode("1,3(x2)"), ElementsAre(1, 3, 3));
  for (const char* bad : {"", "2(x0)", "2(3)", "x", "2(x3", "0"}) {
    EXPECT_FALSE(ExpandSlurmTasksPerNode(bad).ok()) << bad;
  }
}

TEST(SchedulerEnvTest, OpenMpiLauncherAddress) {
  EXPECT_EQ(OpenMpiLauncherAddress("461307904.0;tcp://192.0.2.2:43541;tcp6://[fd00::2]:55791"), "192.0.2.2");
  EXPECT_EQ(OpenMpiLauncherAddress("1.0;tcp6://[fd00::2]:1;tcp://10.0.0.1,10.0.0.2:5"), "10.0.0.1");
  EXPECT_EQ(OpenMpiLauncherAddress("1.0;tcp6://[fd00::2]:1"), std::nullopt);
}

}  // namespace
}  // namespace ddp
