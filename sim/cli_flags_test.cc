// ddp_sim's numeric flags: every bad value is refused with an error naming the flag and the value, before
// any model runs (no abort, no nonsense prediction), and good values pass.
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sim/cli.h"

namespace ddp {
namespace sim {
namespace {

// A prediction that runs with every flag at a good value.
CliFlags Good() {
  CliFlags flags;
  flags.synthetic = "mlp:100,10";
  flags.preset = "10gbe";
  return flags;
}

struct BadCase {
  std::function<void(CliFlags&)> set;
  std::string error;  // the whole message
};

TEST(CliFlagsTest, GoodFlagsPass) {
  EXPECT_TRUE(CheckFlags(Good()).ok());
  absl::StatusOr<std::string> report = RunSubcommand("predict", Good());
  EXPECT_TRUE(report.ok()) << report.status();
}

TEST(CliFlagsTest, EveryBadNumberIsNamedWithItsValue) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<BadCase> cases = {
      {[](CliFlags& f) { f.world_size = 0; }, "--world_size=0: must be from 1 to 16777216 (ranks)"},
      {[](CliFlags& f) { f.world_size = -3; }, "--world_size=-3: must be from 1 to 16777216 (ranks)"},
      {[](CliFlags& f) { f.link_world_size = 1; },
       "--link_world_size=1: must be from 2 to 16777216 (the fit's world size: a ring needs two ranks)"},
      {[](CliFlags& f) { f.max_in_flight = 0; }, "--max_in_flight=0: must be from 1 to 1048576 (collectives at once)"},
      {[](CliFlags& f) { f.rank = -1; }, "--rank=-1: must be from 0 to 16777215 (a rank of the trace)"},
      {[](CliFlags& f) { f.skip = -2; }, "--skip=-2: must be >= 0 (iterations)"},
      {[](CliFlags& f) { f.rates.batch = 0; }, "--batch=0: must be >= 1 (samples per rank)"},
      {[](CliFlags& f) { f.rates.flop_per_s = -1e12; },
       "--tflops=-1: must be a finite number > 0 (TFLOP/s of one rank)"},
      {[nan](CliFlags& f) { f.rates.flop_per_s = nan; },
       "--tflops=nan: must be a finite number > 0 (TFLOP/s of one rank)"},
      {[](CliFlags& f) { f.rates.memory_bytes_per_s = 0; },
       "--mem_gbps=0: must be a finite number > 0 (GB/s of one rank)"},
      {[](CliFlags& f) { f.gbps = 0; f.alpha_us = 10; }, "--gbps=0: must be a finite number > 0 (GB/s of one link)"},
      {[inf](CliFlags& f) { f.gbps = inf; f.alpha_us = 10; },
       "--gbps=inf: must be a finite number > 0 (GB/s of one link)"},
      {[](CliFlags& f) { f.alpha_us = -5; f.gbps = 1; },
       "--alpha_us=-5: must be a finite number >= 0 (microseconds per message)"},
      {[](CliFlags& f) { f.burst_kib = -1; }, "--burst_kib=-1: must be a finite number >= 0 (KiB)"},
      {[](CliFlags& f) { f.compute_lost_to_comm = 1.5; },
       "--compute_lost_to_comm=1.5: must be from 0 to 1 (a share of compute speed)"},
      {[nan](CliFlags& f) { f.compute_lost_to_comm = nan; },
       "--compute_lost_to_comm=nan: must be from 0 to 1 (a share of compute speed)"},
      {[](CliFlags& f) { f.ranks = "2,0,8"; }, "--ranks=2,0,8: \"0\" is not a world size from 1 to 16777216"},
      {[](CliFlags& f) { f.ranks = "2,x"; }, "--ranks=2,x: \"x\" is not a world size from 1 to 16777216"},
      {[](CliFlags& f) { f.caps = "1,-2"; }, "--caps=1,-2: bad cap \"-2\" (MiB from 0 to 2^40, or inf)"},
      {[](CliFlags& f) { f.caps = "nan"; }, "--caps=nan: bad cap \"nan\" (MiB from 0 to 2^40, or inf)"},
      {[](CliFlags& f) { f.caps = "1e300"; }, "--caps=1e300: bad cap \"1e300\" (MiB from 0 to 2^40, or inf)"},
      {[](CliFlags& f) { f.iterations = "5-2"; },
       "--iterations=5-2: iteration range \"5-2\" is not FIRST-END with 0 <= FIRST < END"},
  };
  for (const BadCase& bad : cases) {
    CliFlags flags = Good();
    bad.set(flags);
    const absl::Status checked = CheckFlags(flags);
    EXPECT_EQ(checked.code(), absl::StatusCode::kInvalidArgument) << bad.error;
    EXPECT_EQ(checked.message(), bad.error);
    // Every subcommand refuses it first, whatever flags it reads.
    for (const char* subcommand : {"fit", "profile", "predict", "validate", "scale"}) {
      absl::StatusOr<std::string> report = RunSubcommand(subcommand, flags);
      ASSERT_FALSE(report.ok()) << subcommand << " " << bad.error;
      EXPECT_EQ(report.status().message(), bad.error) << subcommand;
    }
  }
}

TEST(CliFlagsTest, AnExplicitLinkNeedsBothNumbers) {
  CliFlags flags = Good();
  flags.preset.clear();
  flags.alpha_us = 5;
  EXPECT_EQ(RunSubcommand("predict", flags).status().message(), "--alpha_us needs --gbps too");
  flags.alpha_us.reset();
  flags.gbps = 1;
  EXPECT_EQ(RunSubcommand("predict", flags).status().message(), "--gbps needs --alpha_us too");
  flags.alpha_us = 0;  // a zero latency is a link
  EXPECT_TRUE(RunSubcommand("predict", flags).ok());
}

}  // namespace
}  // namespace sim
}  // namespace ddp
