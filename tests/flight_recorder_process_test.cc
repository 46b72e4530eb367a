// The flight recorder end to end, with real processes under ddprun and a rank that SIGSTOPs itself
// (tests/stopped_rank_worker.cc) before round 10, so it never issues call #20 of its Gloo group:
//  * the survivors' first error names the stopped rank and the call it never completed, within about
//    DDP_TIMEOUT_S plus the report window;
//  * every survivor wrote its dump, and flight_recorder_report over the dump folder names the stopped
//    rank too;
//  * when the stopped rank serves the store (tcp://, rank 0), the survivor's error names that rank.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/process.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;

constexpr char kStoppedCall[] = "AllReduce(sum) #20 of 1000 float32";

// Runs `nproc` ranks of the worker under ddprun with a 3 s timeout, dumps under `dump_dir`.
ProcessResult RunJob(int nproc, int stop_rank, const std::string& dump_dir,
                     const std::vector<std::string>& worker_flags = {}) {
  std::vector<std::string> argv = {Runfile("launch/ddprun"), absl::StrCat("--nproc_per_node=", nproc),
                                   "--master_port=0", "--grace_period_s=2", Runfile("tests/stopped_rank_worker"),
                                   absl::StrCat("--stop_rank=", stop_rank)};
  argv.insert(argv.end(), worker_flags.begin(), worker_flags.end());
  RunOptions options;
  options.env = {"DDP_TIMEOUT_S=3", absl::StrCat("DDP_FLIGHT_RECORDER_DIR=", dump_dir)};
  options.timeout = absl::Seconds(60);
  return RunProcess(argv, options);
}

// Rank `rank`'s error line, "" (failing the test) when it printed none.
std::string ErrorLine(const ProcessResult& r, int rank) {
  const std::string prefix = absl::StrCat("[rank ", rank, "] stopped_rank_worker rank ", rank, ": ");
  const std::string all = r.all();
  const size_t at = all.find(prefix + "AllReduce");
  EXPECT_NE(at, std::string::npos) << "rank " << rank << " printed no error\n" << all;
  return at == std::string::npos ? "" : all.substr(at, all.find('\n', at) - at);
}

// The group folder an error names ("every rank's: flight_recorder_report DIR]").
std::string DumpFolder(const std::string& line) {
  std::smatch match;
  EXPECT_TRUE(std::regex_search(line, match, std::regex("flight_recorder_report ([^\\]]+)\\]"))) << line;
  return match.size() > 1 ? match[1].str() : "";
}

// A loopback port that was free a moment ago (the kernel's pick for port 0).
int FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

TEST(FlightRecorderProcessTest, SurvivorsNameTheStoppedRankAndItsCall) {
  const std::string dumps = TempPath("stopped_rank_dumps");
  const ProcessResult r = RunJob(3, 2, dumps);
  EXPECT_NE(r.exit_code, 0) << r.all();
  EXPECT_THAT(r.out, HasSubstr("stopped_rank_worker rank 2: stopping before round 10"));
  std::string folder;
  for (int rank : {0, 1}) {
    const std::string line = ErrorLine(r, rank);
    EXPECT_THAT(line, HasSubstr(absl::StrCat("on rank ", rank, "/3 (gloo)")));
    EXPECT_THAT(line, HasSubstr("[flight recorder: rank 2 is behind: no progress report within 3s from rank 2"));
    EXPECT_THAT(line, HasSubstr(absl::StrCat("it has not completed ", kStoppedCall, ", which ranks 0, 1 are in")));
    folder = DumpFolder(line);
  }
  // Both survivors dumped into one folder, which the stopped rank never reached.
  ASSERT_FALSE(folder.empty());
  EXPECT_EQ(folder.rfind(dumps, 0), 0u) << folder << " is not under " << dumps;
  EXPECT_TRUE(Exists(folder + "/rank0.jsonl")) << folder;
  EXPECT_TRUE(Exists(folder + "/rank1.jsonl")) << folder;
  EXPECT_FALSE(Exists(folder + "/rank2.jsonl")) << folder;

  const ProcessResult report = RunProcess({Runfile("comm/flight_recorder_report"), folder});
  ASSERT_EQ(report.exit_code, 0) << report.all();
  EXPECT_THAT(report.out, HasSubstr("gloo, 3 ranks, timeout 3s; dumps of ranks 0, 1; no dump from rank 2"));
  EXPECT_THAT(report.out, HasSubstr(absl::StrCat("rank 0 is in ", kStoppedCall)));
  EXPECT_THAT(report.out, HasSubstr(absl::StrCat("diagnosis: rank 2 is behind: no dump from rank 2 (stopped, hung, "
                                                 "or busy outside collectives); it has not completed ",
                                                 kStoppedCall, ", which ranks 0, 1 are in")));
  // Without a folder it reports the newest group of the base folder: this one.
  RunOptions from_env;
  from_env.env = {absl::StrCat("DDP_FLIGHT_RECORDER_DIR=", dumps)};
  const ProcessResult newest = RunProcess({Runfile("comm/flight_recorder_report")}, from_env);
  ASSERT_EQ(newest.exit_code, 0) << newest.all();
  EXPECT_THAT(newest.out, HasSubstr("diagnosis: rank 2 is behind"));
}

// Rank 0 serves the store (tcp://) and stops: the survivor's collective times out, the store does not
// answer either, and the error says which rank serves it instead of only that the store is gone.
TEST(FlightRecorderProcessTest, StoppedStoreHostIsNamed) {
  const ProcessResult r = RunJob(2, 0, TempPath("stopped_store_host_dumps"),
                                 {absl::StrCat("--init_method=tcp://127.0.0.1:", FreeLoopbackPort())});
  EXPECT_NE(r.exit_code, 0) << r.all();
  const std::string line = ErrorLine(r, 1);
  EXPECT_THAT(line, HasSubstr("on rank 1/2 (gloo)"));
  EXPECT_THAT(line, HasSubstr("rank 0 serves the store, so it is gone or not responding"));
  EXPECT_THAT(line, HasSubstr(absl::StrCat("[flight recorder: rank 1 is in ", kStoppedCall)));
  // The collective timeout, then one store timeout (not one per store key), then the launcher's grace.
  EXPECT_LT(r.elapsed, absl::Seconds(3 + 3 + 2 + 5)) << r.all();
}

}  // namespace
}  // namespace ddp
