#include "train/elastic_test_jobs.h"

#include "absl/status/statusor.h"
#include "gtest/gtest.h"

namespace ddp {

std::vector<std::string> Job(const std::vector<std::string>& launcher_flags,
                             const std::vector<std::string>& train_flags) {
  std::vector<std::string> argv = {Runfile("launch/ddprun"), "--master_port=0"};
  argv.insert(argv.end(), launcher_flags.begin(), launcher_flags.end());
  argv.push_back(Runfile("train/train"));
  argv.insert(argv.end(), train_flags.begin(), train_flags.end());
  return argv;
}

ProcessResult RunJob(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  RunOptions options;
  options.env = {"DDP_TIMEOUT_S=30"};
  options.env.insert(options.env.end(), env.begin(), env.end());
  options.timeout = absl::Seconds(240);
  return RunProcess(argv, options);
}

std::vector<SampleLogEntry> ReadLog(const std::string& path) {
  absl::StatusOr<std::vector<SampleLogEntry>> entries = ReadSampleLog(path);
  EXPECT_TRUE(entries.ok()) << entries.status();
  return entries.ok() ? *entries : std::vector<SampleLogEntry>();
}

std::vector<std::string> Common(const std::string& backend) {
  return {"--model=mlp", "--epochs=1", "--lr_schedule=constant", "--backend=" + backend};
}

}  // namespace ddp
