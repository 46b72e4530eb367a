// torchrun's console options as ddprun applies them to one worker's output (launch/rank_output.h) and
// --virtual_local_rank's environment (launch/virtual_local_rank.h): pure parts, no processes. The
// expected prefixes are what Python's string.Template(t).safe_substitute gives (torchrun 2.15).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launch/rank_output.h"
#include "launch/virtual_local_rank.h"

namespace ddp {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const LogLinePrefixValues kValues = {"trainer", 3, 1, "h"};

TEST(LogLinePrefixTest, ExpandsAsPythonsSafeSubstitute) {
  EXPECT_EQ(ExpandLogLinePrefix("[${role_name}${local_rank}]:", kValues), "[trainer1]:");
  EXPECT_EQ(ExpandLogLinePrefix("${hostname}:${rank}: ", kValues), "h:3: ");
  EXPECT_EQ(ExpandLogLinePrefix("$local_rank$role_name", kValues), "1trainer");
  // Unknown names, "$$", a lone "$", unclosed or spaced braces: as safe_substitute leaves them.
  EXPECT_EQ(ExpandLogLinePrefix("$rank|$rankx|${rank}x|$$rank|$|${rank|${nope}|$nope|${ rank}|a$1", kValues),
            "3|$rankx|3x|$rank|$|${rank|${nope}|$nope|${ rank}|a$1");
  EXPECT_EQ(ExpandLogLinePrefix("", kValues), "");
  EXPECT_EQ(ExpandLogLinePrefix("$", kValues), "$");
}

TEST(DuplicateFiltersTest, SplitsAsTorchrunsCommaSeparatedList) {
  EXPECT_THAT(ParseDuplicateFilters("apple,orange"), ElementsAre("apple", "orange"));
  EXPECT_THAT(ParseDuplicateFilters("a,,b,c"), ElementsAre("a,b", "c"));
  EXPECT_THAT(ParseDuplicateFilters(""), ElementsAre(""));
  EXPECT_THAT(ParseDuplicateFilters("x,"), ElementsAre("x", ""));
}

std::string ReadAll(const std::string& path) {
  std::stringstream text;
  text << std::ifstream(path).rdbuf();
  return text.str();
}

// A RankOutput writing its console to two files; the attempt folder gets the filtered logs.
struct Console {
  explicit Console(const std::string& name, int rank = 3)
      : dir(absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name)),
        out_path(dir + ".out"),
        err_path(dir + ".err"),
        out(::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644)),
        err(::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644)),
        output(rank, RedirectMode::kAll, out, err, -1) {
    ::mkdir(dir.c_str(), 0755);
  }
  ~Console() {
    ::close(out);
    ::close(err);
  }
  std::string dir, out_path, err_path;
  int out, err;
  RankOutput output;
};

TEST(RankOutputConsoleTest, TheTemplateReplacesTheRankPrefix) {
  Console c("prefix");
  WorkerConsoleOptions options;
  options.log_line_prefix_template = "[${role_name}${local_rank}]:";
  ASSERT_TRUE(c.output.SetConsoleOptions(options, kValues, "").ok());
  c.output.Feed(RankOutput::Stream::kStdout, "one\ntwo\n");
  c.output.Feed(RankOutput::Stream::kStderr, "oops\n");
  EXPECT_EQ(ReadAll(c.out_path), "[trainer1]:one\n[trainer1]:two\n");
  EXPECT_EQ(ReadAll(c.err_path), "[trainer1]:oops\n");
}

TEST(RankOutputConsoleTest, WithoutATemplateLinesKeepTheRankPrefix) {
  Console c("default");
  ASSERT_TRUE(c.output.SetConsoleOptions(WorkerConsoleOptions(), kValues, "").ok());
  c.output.Feed(RankOutput::Stream::kStdout, "one\n");
  EXPECT_EQ(ReadAll(c.out_path), "[rank 3] one\n");
}

// Matching console lines also go, prefixed, to the attempt's filtered log of their stream; both workers of
// an attempt append to the same file.
TEST(RankOutputConsoleTest, DuplicateFiltersCopyMatchingLines) {
  Console a("filtered", 0);
  WorkerConsoleOptions options;
  options.duplicate_stdout_filters = {"loss", "acc"};
  options.duplicate_stderr_filters = {"Error"};
  ASSERT_TRUE(a.output.SetConsoleOptions(options, {"default", 0, 0, "h"}, a.dir).ok());
  RankOutput b(1, RedirectMode::kAll, a.out, a.err, -1);
  ASSERT_TRUE(b.SetConsoleOptions(options, {"default", 1, 1, "h"}, a.dir).ok());
  a.output.Feed(RankOutput::Stream::kStdout, "step 1 loss 0.5\nnothing here\n");
  b.Feed(RankOutput::Stream::kStdout, "acc 0.9\n");
  a.output.Feed(RankOutput::Stream::kStderr, "ValueError: x\nwarning\n");
  EXPECT_EQ(ReadAll(a.dir + "/filtered_stdout.log"), "[rank 0] step 1 loss 0.5\n[rank 1] acc 0.9\n");
  EXPECT_EQ(ReadAll(a.dir + "/filtered_stderr.log"), "[rank 0] ValueError: x\n");
  EXPECT_EQ(ReadAll(a.out_path), "[rank 0] step 1 loss 0.5\n[rank 0] nothing here\n[rank 1] acc 0.9\n");
}

TEST(RankOutputConsoleTest, FiltersNeedAFolder) {
  Console c("nofolder");
  WorkerConsoleOptions options;
  options.duplicate_stdout_filters = {"x"};
  EXPECT_FALSE(c.output.SetConsoleOptions(options, kValues, "").ok());
  EXPECT_THAT(std::string(c.output.SetConsoleOptions(options, kValues, "/nonexistent/dir").message()),
              HasSubstr("/nonexistent/dir/filtered_stdout.log"));
}

EnvLookup Lookup(std::map<std::string, std::string> env) {
  return [env](const std::string& name) -> std::optional<std::string> {
    auto it = env.find(name);
    return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
}

TEST(VirtualLocalRankTest, EachWorkerSeesItsOwnDeviceAsZero) {
  std::map<std::string, std::string> env = {{"LOCAL_RANK", "1"}};
  ApplyVirtualLocalRank(1, Lookup({}), &env);
  EXPECT_EQ(env["LOCAL_RANK"], "0");
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "1");
  EXPECT_EQ(env.count("HIP_VISIBLE_DEVICES"), 0u);

  ApplyVirtualLocalRank(1, Lookup({{"CUDA_VISIBLE_DEVICES", "4, 6"}}), &env);
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "6");

  ApplyVirtualLocalRank(0, Lookup({{"CUDA_VISIBLE_DEVICES", "4,6"}, {"HIP_VISIBLE_DEVICES", "2,3"}}), &env);
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "2");
  EXPECT_EQ(env["HIP_VISIBLE_DEVICES"], "2");
}

TEST(VirtualLocalRankTest, MoreWorkersThanVisibleDevicesIsRefused) {
  EXPECT_TRUE(CheckVirtualLocalRank(8, Lookup({})).ok());
  EXPECT_TRUE(CheckVirtualLocalRank(2, Lookup({{"CUDA_VISIBLE_DEVICES", "4,6"}})).ok());
  EXPECT_THAT(std::string(CheckVirtualLocalRank(3, Lookup({{"HIP_VISIBLE_DEVICES", "0,1"}})).message()),
              HasSubstr("local_rank 2 exceeds available GPUs in HIP_VISIBLE_DEVICES=0,1"));
}

}  // namespace
}  // namespace ddp
