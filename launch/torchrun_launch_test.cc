// ddprun end to end with torchrun's command line: c10d rendezvous of two nodes on this host, an elastic
// node range, Python scripts and their error files, torchrun's log tree (--redirects, --tee), and the
// variables torchrun sets. PyTorch itself is not needed (tests/torchrun_parity_test.sh compares with it).
#include <glob.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "store/socket_util.h"
#include "testing/process.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

ProcessResult Ddprun(const std::vector<std::string>& args, std::vector<std::string> env = {}) {
  std::vector<std::string> argv = {Runfile("launch/ddprun")};
  argv.insert(argv.end(), args.begin(), args.end());
  RunOptions options;
  options.timeout = absl::Seconds(30);
  options.env = std::move(env);
  return RunProcess(argv, options);
}

std::string ReadFile(const std::string& path) {
  std::stringstream text;
  text << std::ifstream(path).rdbuf();
  return text.str();
}

std::vector<std::string> Glob(const std::string& pattern) {
  glob_t g = {};
  std::vector<std::string> paths;
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0) paths.assign(g.gl_pathv, g.gl_pathv + g.gl_pathc);
  ::globfree(&g);
  return paths;
}

std::string WriteScript(const std::string& name, const std::string& text) {
  const std::string path = TempPath(name);
  std::ofstream(path) << text;
  return path;
}

// Two ddpruns with the same command line (no --node_rank), as on two hosts: the first to listen on the
// endpoint hosts the store and is node 0, the other joins and is node 1; all four workers then meet in
// that store.
TEST(TorchrunLaunchTest, C10dNodesMeetAtTheEndpointAndGetTheirRanksThere) {
  const int port = *PickFreePort();
  const std::vector<std::string> argv = {
      Runfile("launch/ddprun"), "--nnodes=2", "--nproc_per_node=2", "--rdzv_backend=c10d",
      absl::StrCat("--rdzv_endpoint=127.0.0.1:", port), "--rdzv_id=t1", "--job_token=secret", "--", "/bin/sh", "-c",
      absl::StrCat("echo G=$GROUP_RANK R=$RANK W=$WORLD_SIZE M=$MASTER_ADDR; exec ",
                   Runfile("launch/store_rendezvous_check"))};
  auto a = BackgroundProcess::Start(argv, {}, TempPath("node_a.log"));
  auto b = BackgroundProcess::Start(argv, {}, TempPath("node_b.log"));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(a->Wait(absl::Seconds(30)), 0) << a->Output();
  EXPECT_EQ(b->Wait(absl::Seconds(30)), 0) << b->Output();
  const std::string both = a->Output() + b->Output();
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_THAT(both, HasSubstr(absl::StrCat("[rank ", rank, "] G=", rank / 2, " R=", rank, " W=4 M=127.0.0.1")));
    EXPECT_THAT(both, HasSubstr(absl::StrCat("[rank ", rank, "] rendezvous ok")));
  }
  EXPECT_THAT(both, HasSubstr("is taken on this host: joining the rendezvous there"));
}

// --nnodes=1:2: with no second node, the rendezvous closes after last_call_timeout with one node.
TEST(TorchrunLaunchTest, AnElasticRangeStartsWithTheNodesThatCame) {
  ProcessResult r = Ddprun({"--nnodes=1:2", "--nproc_per_node=2", "--rdzv_backend=c10d",
                            absl::StrCat("--rdzv_endpoint=127.0.0.1:", *PickFreePort()),
                            "--rdzv_conf=last_call_timeout=0.3", "--job_token=s", "/bin/sh", "-c",
                            "echo W=$WORLD_SIZE G=$GROUP_WORLD_SIZE"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("[rank 1] W=2 G=1"));
  EXPECT_THAT(r.err, HasSubstr("the rendezvous closed with 1 nodes (--nnodes=1:2)"));
}

// A .py script runs with PYTHON_EXEC -u; a failing rank's error file (what PyTorch's @record writes to
// TORCHELASTIC_ERROR_FILE) is shown in ddprun's report.
TEST(TorchrunLaunchTest, PythonScriptsRunWithPythonExecAndTheirErrorFilesAreReported) {
  const std::string script = WriteScript("fail.py", R"(import json, os, sys
import time
print("argv", sys.argv[1:], "unbuffered", "-u" in sys.orig_argv)
marker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rank0_printed")
if os.environ["RANK"] == "0":
    open(marker, "w").close()
if os.environ["RANK"] == "1":
    deadline = time.time() + 30  # fail only after rank 0 printed, so its line is in the output
    while not os.path.exists(marker) and time.time() < deadline:
        time.sleep(0.01)
    with open(os.environ["TORCHELASTIC_ERROR_FILE"], "w") as f:
        json.dump({"message": {"message": "ValueError: boom on rank 1",
                               "extraInfo": {"py_callstack": "Traceback: line 3", "timestamp": "0"}}}, f)
    sys.exit(3)
)");
  ProcessResult r = Ddprun({"--nproc_per_node=2", script, "--lr", "0.1"}, {"PYTHON_EXEC=/usr/bin/python3"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_THAT(r.out, HasSubstr("[rank 0] argv ['--lr', '0.1'] unbuffered True"));
  EXPECT_THAT(r.err, HasSubstr("rank 1 failed first with exit code 3"));
  EXPECT_THAT(r.err, HasSubstr("rank 1's error file (TORCHELASTIC_ERROR_FILE) says:\n  | ValueError: boom on rank 1\n"
                               "  | Traceback: line 3"));
  ProcessResult module = Ddprun({"-m", "json.tool", "--help"}, {"PYTHON_EXEC=/usr/bin/python3"});
  EXPECT_EQ(module.exit_code, 0) << module.err;
  EXPECT_THAT(module.out, HasSubstr("[rank 0] usage:"));
}

// torchrun's tree under --log_dir: -r redirects a stream to its file only, -t copies it there, and
// --local_ranks_filter hides other local ranks from the console (not from the files).
TEST(TorchrunLaunchTest, RedirectsTeeAndFilterFollowTorchrunsLayout) {
  const std::string dir = TempPath("logs");
  ProcessResult r = Ddprun({"--nproc_per_node=2", "--master_port=0", absl::StrCat("--log_dir=", dir), "-r", "0:1",
                            "-t", "1:3", "--local_ranks_filter=1", "--rdzv_id=myjob", "/bin/sh", "-c",
                            "echo out$LOCAL_RANK; echo err$LOCAL_RANK >&2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("[rank 1] out1"));
  EXPECT_THAT(r.err, HasSubstr("[rank 1] err1"));
  EXPECT_THAT(r.all(), Not(HasSubstr("out0")));
  EXPECT_THAT(r.all(), Not(HasSubstr("err0")));
  const std::vector<std::string> runs = Glob(dir + "/myjob_*");
  ASSERT_EQ(runs.size(), 1u) << "one run folder named after --rdzv_id";
  EXPECT_EQ(ReadFile(runs[0] + "/attempt_0/0/stdout.log"), "out0\n");
  EXPECT_TRUE(Glob(runs[0] + "/attempt_0/0/stderr.log").empty()) << "rank 0's stderr is neither redirected nor tee'd";
  EXPECT_EQ(ReadFile(runs[0] + "/attempt_0/1/stdout.log"), "out1\n");
  EXPECT_EQ(ReadFile(runs[0] + "/attempt_0/1/stderr.log"), "err1\n");
  EXPECT_EQ(ReadFile(dir + "/rank_0.log"), "out0\nerr0\n") << "ddprun's own per-rank log keeps everything";
}

// The variables torchrun sets beyond the rank ones, across a restart.
TEST(TorchrunLaunchTest, TorchrunsVariablesFollowRoleRunIdAndRestarts) {
  ProcessResult r = Ddprun({"--nproc_per_node=1", "--master_port=0", "--role=trainer", "--rdzv_id=r7",
                            "--max_restarts=1", "/bin/sh", "-c",
                            "echo N=$ROLE_NAME I=$TORCHELASTIC_RUN_ID C=$TORCHELASTIC_RESTART_COUNT "
                            "E=$TORCHELASTIC_ERROR_FILE S=$TORCHELASTIC_SIGNALS_TO_HANDLE "
                            "A=$TORCH_NCCL_ASYNC_ERROR_HANDLING U=$TORCHELASTIC_USE_AGENT_STORE; "
                            "[ $TORCHELASTIC_RESTART_COUNT = 1 ]"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("N=trainer I=r7 C=0 E=/"));
  EXPECT_THAT(r.out, HasSubstr("/attempt_0/0/error.json S=SIGTERM,SIGINT,SIGHUP,SIGQUIT A=1 U=False"));
  EXPECT_THAT(r.out, HasSubstr("C=1 E="));
  EXPECT_THAT(r.out, HasSubstr("/attempt_1/0/error.json"));
}

// --log_line_prefix_template replaces "[rank N] " on every console line (torchrun's macros), and
// --duplicate_*_filters copy matching console lines, prefixed, into the attempt's filtered logs, one
// file for all local ranks (torchrun's <run>/attempt_N/filtered_std{out,err}.log).
TEST(TorchrunLaunchTest, LogLinePrefixTemplateAndDuplicateFilters) {
  const std::string dir = TempPath("filtered_logs");
  ProcessResult r = Ddprun({"--nproc_per_node=2", "--master_port=0", "--role=trainer", "--rdzv_id=fj",
                            absl::StrCat("--log_dir=", dir), "--log_line_prefix_template=<${role_name}${local_rank}:$rank $${rank}>",
                            "--duplicate_stdout_filters=loss,,x,acc", "--duplicate_stderr_filters=Error", "/bin/sh", "-c",
                            "echo step loss,x=1; echo nothing; echo acc$LOCAL_RANK; echo ValueError$RANK >&2; echo warn >&2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string prefix = absl::StrCat("<trainer", rank, ":", rank, " ${rank}>");
    EXPECT_THAT(r.out, HasSubstr(absl::StrCat(prefix, "step loss,x=1\n")));
    EXPECT_THAT(r.out, HasSubstr(absl::StrCat(prefix, "nothing\n")));
    EXPECT_THAT(r.err, HasSubstr(absl::StrCat(prefix, "warn\n")));
  }
  EXPECT_THAT(r.all(), Not(HasSubstr("[rank ")));
  const std::vector<std::string> runs = Glob(dir + "/fj_*");
  ASSERT_EQ(runs.size(), 1u);
  const std::string out = ReadFile(runs[0] + "/attempt_0/filtered_stdout.log");
  const std::string err = ReadFile(runs[0] + "/attempt_0/filtered_stderr.log");
  for (int rank = 0; rank < 2; ++rank) {
    const std::string prefix = absl::StrCat("<trainer", rank, ":", rank, " ${rank}>");
    EXPECT_THAT(out, HasSubstr(absl::StrCat(prefix, "step loss,x=1\n")));
    EXPECT_THAT(out, HasSubstr(absl::StrCat(prefix, "acc", rank, "\n")));
    EXPECT_THAT(err, HasSubstr(absl::StrCat(prefix, "ValueError", rank, "\n")));
  }
  EXPECT_THAT(out, Not(HasSubstr("nothing")));
  EXPECT_THAT(err, Not(HasSubstr("warn")));
}

// --virtual_local_rank: every worker sees LOCAL_RANK=0 and its own entry of the launcher's
// CUDA_VISIBLE_DEVICES; too few entries is refused before any worker starts.
TEST(TorchrunLaunchTest, VirtualLocalRankGivesEachWorkerItsOwnDevice) {
  ProcessResult r = Ddprun({"--nproc_per_node=2", "--master_port=0", "--virtual_local_rank", "/bin/sh", "-c",
                            "echo L=$LOCAL_RANK D=$CUDA_VISIBLE_DEVICES"},
                           {"CUDA_VISIBLE_DEVICES=5,7"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("[rank 0] L=0 D=5"));
  EXPECT_THAT(r.out, HasSubstr("[rank 1] L=0 D=7"));
  ProcessResult plain = Ddprun({"--nproc_per_node=2", "--master_port=0", "/bin/sh", "-c",
                                "echo L=$LOCAL_RANK D=$CUDA_VISIBLE_DEVICES"},
                               {"CUDA_VISIBLE_DEVICES=5,7"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_THAT(plain.out, HasSubstr("[rank 1] L=1 D=5,7"));
  ProcessResult refused = Ddprun({"--nproc_per_node=3", "--virtual_local_rank", "/bin/true"},
                                 {"CUDA_VISIBLE_DEVICES=5,7"});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_THAT(refused.err, HasSubstr("local_rank 2 exceeds available GPUs in CUDA_VISIBLE_DEVICES=5,7"));
}

}  // namespace
}  // namespace ddp
