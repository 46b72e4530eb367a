// ddprun's command line (launch/torchrun_args.h): torchrun's flags and spellings, the refusals, and the
// rule for running the script.
#include "launch/torchrun_args.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddp {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// An environment with python3 reachable (PYTHON_EXEC names a file that exists and is executable).
std::map<std::string, std::string> Env() { return {{"PYTHON_EXEC", "/bin/true"}, {"PATH", "/usr/bin:/bin"}}; }

// A non-executable script file in the test's temporary folder.
std::string Script(const std::string& name) {
  const std::string path = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  (void)!::write(fd, "print(1)\n", 9);
  ::close(fd);
  return path;
}

absl::StatusOr<DdprunCommandLine> Parse(std::vector<std::string> args,
                                        std::map<std::string, std::string> env = Env(),
                                        LocalDevices devices = {}) {
  args.insert(args.begin(), "ddprun");
  return ParseDdprunCommandLine(args, env, devices);
}

TEST(TorchrunArgsTest, BothSpellingsAndBothValueForms) {
  const std::string script = Script("a.py");
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--nproc_per_node=3", "--max_restarts", "2", script, "--lr", "1"},
        std::vector<std::string>{"--nproc-per-node", "3", "--max-restarts=2", script, "--lr", "1"}}) {
    auto c = Parse(args);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->options.nproc_per_node, 3);
    EXPECT_EQ(c->options.max_restarts, 2);
    EXPECT_THAT(c->options.command, ElementsAre("/bin/true", "-u", script, "--lr", "1"));
  }
}

TEST(TorchrunArgsTest, FlagsAfterTheScriptBelongToIt) {
  const std::string script = Script("b.py");
  auto c = Parse({script, "--nproc_per_node=4", "-m"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->options.nproc_per_node, 1);
  EXPECT_THAT(c->options.command, ElementsAre("/bin/true", "-u", script, "--nproc_per_node=4", "-m"));
}

TEST(TorchrunArgsTest, DoubleDashEndsTheFlags) {
  auto c = Parse({"--nproc_per_node=2", "--no_python", "--", "-weird-program", "--nproc_per_node=3"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->options.nproc_per_node, 2);
  EXPECT_THAT(c->options.command, ElementsAre("-weird-program", "--nproc_per_node=3"));
}

TEST(TorchrunArgsTest, ModuleNoPythonAndRunPath) {
  auto module = Parse({"-m", "pkg.train", "x"});
  ASSERT_TRUE(module.ok()) << module.status();
  EXPECT_THAT(module->options.command, ElementsAre("/bin/true", "-u", "-m", "pkg.train", "x"));
  auto direct = Parse({"--no-python", "train.py", "x"});
  ASSERT_TRUE(direct.ok()) << direct.status();
  EXPECT_THAT(direct->options.command, ElementsAre("train.py", "x"));
  const std::string script = Script("c.py");
  auto run_path = Parse({"--run_path", script, "x"});
  ASSERT_TRUE(run_path.ok()) << run_path.status();
  ASSERT_EQ(run_path->options.command.size(), 6u);
  EXPECT_EQ(run_path->options.command[2], "-c");
  EXPECT_THAT(run_path->options.command[3], HasSubstr("runpy.run_path"));
  EXPECT_EQ(run_path->options.command[4], script);
  EXPECT_THAT(Parse({"--run_path", "rel.py"}).status().message(), HasSubstr("absolute"));
  EXPECT_THAT(Parse({"-m", "--no_python", "x"}).status().message(), HasSubstr("not both"));
}

// Note [Which interpreter]: an executable that is not a .py runs as itself; a missing script is named.
TEST(TorchrunArgsTest, ProgramsRunAsThemselvesScriptsWithPython) {
  auto binary = Parse({"sh", "-c", "true"});  // found on PATH
  ASSERT_TRUE(binary.ok()) << binary.status();
  EXPECT_THAT(binary->options.command, ElementsAre("sh", "-c", "true"));
  EXPECT_THAT(Parse({"/nonexistent/x.py"}).status().message(), HasSubstr("does not exist"));
  auto no_python = Parse({Script("d.py")}, {{"PATH", "/nonexistent"}});
  EXPECT_THAT(no_python.status().message(), HasSubstr("python3 (on PATH) is not an executable"));
}

TEST(TorchrunArgsTest, ImplicitAndExplicitStandaloneUseC10dOnAFreePort) {
  const std::string script = Script("e.py");
  for (const std::vector<std::string>& args : {std::vector<std::string>{script},
                                               std::vector<std::string>{"--standalone", "--rdzv_id=x", script}}) {
    auto c = Parse(args);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->options.rdzv_backend, RendezvousBackend::kC10d);
    EXPECT_EQ(c->options.rdzv_host, "localhost");
    EXPECT_EQ(c->options.rdzv_port, 0);
    EXPECT_EQ(c->options.run_id.size(), 36u);  // a UUID, as torchrun's
    EXPECT_EQ(c->options.run_id[14], '4');
  }
  auto fixed = Parse({"--master_port=29555", script});  // torchrun: --master_port keeps it static
  ASSERT_TRUE(fixed.ok());
  EXPECT_EQ(fixed->options.rdzv_backend, RendezvousBackend::kStatic);
  EXPECT_EQ(fixed->options.master_port, 29555);
  EXPECT_EQ(fixed->options.run_id, "none");
  EXPECT_THAT(Parse({"--standalone", "--nnodes=2", script}).status().message(), HasSubstr("one-node"));
}

TEST(TorchrunArgsTest, C10dEndpointNodesAndConf) {
  const std::string script = Script("f.py");
  auto c = Parse({"--nnodes=2:4", "--rdzv_backend=c10d", "--rdzv_endpoint=10.0.0.1", "--rdzv_id=job7",
                  "--rdzv_conf=join_timeout=5,last_call_timeout=0.5,is_host=false", "--node_rank=3", script});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->options.min_nodes, 2);
  EXPECT_EQ(c->options.nnodes, 4);
  EXPECT_EQ(c->options.rdzv_host, "10.0.0.1");
  EXPECT_EQ(c->options.rdzv_port, 29400);
  EXPECT_EQ(c->options.run_id, "job7");
  EXPECT_EQ(c->options.join_timeout, absl::Seconds(5));
  EXPECT_EQ(c->options.last_call_timeout, absl::Milliseconds(500));
  EXPECT_EQ(c->options.is_host, false);
  EXPECT_EQ(c->options.node_rank, 0);
  EXPECT_THAT(c->warnings, ElementsAre(HasSubstr("--node_rank is only used for static")));
  auto v6 = Parse({"--rdzv_backend=c10d", "--rdzv_endpoint=[::1]:1234", script});
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(v6->options.rdzv_host, "::1");
  EXPECT_EQ(v6->options.rdzv_port, 1234);
  EXPECT_THAT(Parse({"--rdzv_backend=c10d", script}).status().message(), HasSubstr("needs HOST[:PORT]"));
  EXPECT_THAT(Parse({"--nnodes=2", "--rdzv_backend=c10d", "--rdzv_endpoint=h:0", script}).status().message(),
              HasSubstr("one-node"));
  EXPECT_THAT(Parse({"--rdzv_conf=color=red", "--rdzv_backend=c10d", "--rdzv_endpoint=h", script}).status().message(),
              HasSubstr("unknown key \"color\""));
  EXPECT_THAT(Parse({"--nnodes=3:2", script}).status().message(), HasSubstr("MIN <= MAX"));
  EXPECT_THAT(Parse({"--nnodes=1:2", script}).status().message(), HasSubstr("needs --rdzv_backend=c10d"));
  EXPECT_THAT(Parse({"--rdzv_backend=etcd", script}).status().message(), HasSubstr("etcd server"));
}

TEST(TorchrunArgsTest, StaticEndpointGivesMasterAddressAndPort) {
  auto c = Parse({"--nnodes=2", "--node_rank=1", "--rdzv_endpoint=10.1.2.3:4444", Script("g.py")});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->options.rdzv_backend, RendezvousBackend::kStatic);
  EXPECT_EQ(c->options.master_addr, "10.1.2.3");
  EXPECT_EQ(c->options.master_port, 4444);
  EXPECT_EQ(c->options.node_rank, 1);
}

TEST(TorchrunArgsTest, NprocPerNodeWords) {
  LocalDevices cpu_only{6, 0};
  LocalDevices with_gpus{16, 2};
  EXPECT_EQ(*ResolveNprocPerNode("cpu", with_gpus), 16);
  EXPECT_EQ(*ResolveNprocPerNode("gpu", with_gpus), 2);
  EXPECT_EQ(*ResolveNprocPerNode("auto", with_gpus), 2);
  EXPECT_EQ(*ResolveNprocPerNode("auto", cpu_only), 6);
  EXPECT_THAT(ResolveNprocPerNode("gpu", cpu_only).status().message(), HasSubstr("no CUDA device"));
  EXPECT_THAT(ResolveNprocPerNode("0", cpu_only).status().message(), HasSubstr("[1, 1024]"));
  EXPECT_THAT(ResolveNprocPerNode("many", cpu_only).status().message(), HasSubstr("cpu, gpu or auto"));
}

TEST(TorchrunArgsTest, OutputFlags) {
  auto c = Parse({"-r", "3", "-t0:1,1:2", "--local_ranks_filter=0,2", "--log_dir=/tmp/x", Script("h.py")});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->options.redirects.For(5).out);
  EXPECT_TRUE(c->options.redirects.For(5).err);
  EXPECT_TRUE(c->options.tee.For(0).out);
  EXPECT_FALSE(c->options.tee.For(0).err);
  EXPECT_TRUE(c->options.tee.For(1).err);
  EXPECT_FALSE(c->options.tee.For(2).out || c->options.tee.For(2).err);
  EXPECT_THAT(c->options.local_ranks_filter, ElementsAre(0, 2));
  EXPECT_EQ(c->options.log_dir, "/tmp/x");
}

TEST(TorchrunArgsTest, EnvironmentDefaultsRoleSignalsAndIntervals) {
  std::map<std::string, std::string> env = Env();
  env["PET_NPROC_PER_NODE"] = "5";
  env["PET_STANDALONE"] = "1";
  auto c = Parse({"--role=trainer", "--signals_to_handle=SIGTERM,SIGUSR1", "--monitor_interval=0.5",
                  "--shutdown_timeout=7", Script("i.py")},
                 env);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->options.nproc_per_node, 5);
  EXPECT_EQ(c->options.rdzv_backend, RendezvousBackend::kC10d);
  EXPECT_EQ(c->options.role, "trainer");
  EXPECT_THAT(c->options.signals_to_handle, ElementsAre(SIGTERM, SIGUSR1));
  EXPECT_EQ(c->options.monitor_interval, absl::Milliseconds(500));
  EXPECT_EQ(c->options.grace_period, absl::Seconds(7));
  auto flag_wins = Parse({"--nproc_per_node=2", Script("j.py")}, env);
  ASSERT_TRUE(flag_wins.ok());
  EXPECT_EQ(flag_wins->options.nproc_per_node, 2);
  EXPECT_THAT(Parse({"--signals_to_handle=SIGKILL", Script("k.py")}).status().message(), HasSubstr("SIGKILL"));
}

// --log_line_prefix_template, with torchrun's fallback TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE and PET_ default;
// --duplicate_*_filters with torchrun's list syntax (",," is a comma).
TEST(TorchrunArgsTest, ConsoleOptions) {
  const std::string script = Script("m.py");
  auto plain = Parse({script});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->options.console.log_line_prefix_template, "");
  EXPECT_TRUE(plain->options.console.duplicate_stdout_filters.empty());
  EXPECT_TRUE(plain->options.console.duplicate_stderr_filters.empty());

  auto given = Parse({"--log-line-prefix-template", "${hostname}:${rank}: ", "--duplicate_stdout_filters=loss,,acc,step",
                      "--duplicate-stderr-filters=Error", script});
  ASSERT_TRUE(given.ok()) << given.status();
  EXPECT_EQ(given->options.console.log_line_prefix_template, "${hostname}:${rank}: ");
  EXPECT_THAT(given->options.console.duplicate_stdout_filters, ElementsAre("loss,acc", "step"));
  EXPECT_THAT(given->options.console.duplicate_stderr_filters, ElementsAre("Error"));

  std::map<std::string, std::string> env = Env();
  env["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] = "[${role_name}${local_rank}]:";
  auto from_env = Parse({script}, env);
  ASSERT_TRUE(from_env.ok()) << from_env.status();
  EXPECT_EQ(from_env->options.console.log_line_prefix_template, "[${role_name}${local_rank}]:");
  env["PET_LOG_LINE_PREFIX_TEMPLATE"] = "<${rank}>";
  auto pet_wins = Parse({script}, env);
  ASSERT_TRUE(pet_wins.ok()) << pet_wins.status();
  EXPECT_EQ(pet_wins->options.console.log_line_prefix_template, "<${rank}>");
  auto flag_wins = Parse({"--log_line_prefix_template=R${rank} ", script}, env);
  ASSERT_TRUE(flag_wins.ok()) << flag_wins.status();
  EXPECT_EQ(flag_wins->options.console.log_line_prefix_template, "R${rank} ");
}

// --virtual_local_rank: a boolean (PET_VIRTUAL_LOCAL_RANK=1 too); more workers than the launcher's
// CUDA_VISIBLE_DEVICES lists is refused before anything starts, in torchrun's words.
TEST(TorchrunArgsTest, VirtualLocalRank) {
  const std::string script = Script("n.py");
  auto off = Parse({script});
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->options.virtual_local_rank);
  auto on = Parse({"--virtual-local-rank", "--nproc_per_node=4", script});
  ASSERT_TRUE(on.ok()) << on.status();
  EXPECT_TRUE(on->options.virtual_local_rank);
  std::map<std::string, std::string> env = Env();
  env["PET_VIRTUAL_LOCAL_RANK"] = "1";
  env["CUDA_VISIBLE_DEVICES"] = "3,5";
  auto pet = Parse({"--nproc_per_node=2", script}, env);
  ASSERT_TRUE(pet.ok()) << pet.status();
  EXPECT_TRUE(pet->options.virtual_local_rank);
  EXPECT_THAT(Parse({"--nproc_per_node=3", script}, env).status().message(),
              HasSubstr("--virtual_local_rank: local_rank 2 exceeds available GPUs in CUDA_VISIBLE_DEVICES=3,5"));
  EXPECT_THAT(Parse({"--virtual_local_rank=1", script}).status().message(), HasSubstr("takes no value"));
}

TEST(TorchrunArgsTest, RefusedFlagsSayWhy) {
  const std::string script = Script("l.py");
  EXPECT_TRUE(Parse({"--start_method=spawn", "--event_log_handler=null", script}).ok());
  EXPECT_THAT(Parse({"--start_method=fork", script}).status().message(),
              HasSubstr("--start_method=fork is not supported by ddprun: ddprun starts every worker"));
  EXPECT_THAT(Parse({"--logs_specs", "x", script}).status().message(), HasSubstr("Python entry point"));
  EXPECT_THAT(Parse({"--numa_binding=node", script}).status().message(),
              HasSubstr("--numa_binding=node is not supported by ddprun: not implemented: it binds each worker"));
  EXPECT_THAT(Parse({"--nosuch", script}).status().message(), HasSubstr("unknown flag --nosuch"));
  EXPECT_THAT(Parse({"--standalone=1", script}).status().message(), HasSubstr("takes no value"));
  EXPECT_THAT(Parse({"--nproc_per_node"}).status().message(), HasSubstr("needs a value"));
  EXPECT_THAT(Parse({"--shutdown_timeout=1", "--grace_period_s=2", script}).status().message(), HasSubstr("not both"));
  EXPECT_TRUE(Parse({"-h"})->help);
  EXPECT_THAT(DdprunUsage(), HasSubstr("--rdzv_endpoint"));
}

}  // namespace
}  // namespace ddp
