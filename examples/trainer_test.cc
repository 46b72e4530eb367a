// examples/train end to end: a short run learns, flags are validated by name, shards are exact, and
// 2-rank DDP under ddprun writes the same averaged first gradients as one process on the joint batch.
#include "examples/trainer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <set>

#include "absl/strings/str_cat.h"
#include "examples/train_step.h"
#include "nn/safetensors.h"

namespace ddp {
namespace {

std::string Runfile(const std::string& path) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir == nullptr || workspace == nullptr) return path;
  return absl::StrCat(srcdir, "/", workspace, "/", path);
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

// Runs a shell command; returns its exit code and combined output.
int RunCommand(const std::string& command, std::string* output) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  char buffer[4096];
  while (fgets(buffer, sizeof(buffer), pipe) != nullptr) output->append(buffer);
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(TrainerTest, ShortRunLearns) {
  TrainConfig config;
  config.model = "mlp";
  config.epochs = 1;
  config.max_steps = 300;
  config.metrics_out = TempPath("metrics.jsonl");
  std::remove(config.metrics_out.c_str());
  auto result = RunTraining(config);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_GT(result->accuracy, 0.75);
  EXPECT_EQ(result->count, 10000);
  std::string metrics;
  ASSERT_EQ(RunCommand("cat " + config.metrics_out, &metrics), 0);
  EXPECT_NE(metrics.find("\"epoch\": 1, \"steps\": 300"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("\"test_acc\""), std::string::npos);
}

TEST(TrainerTest, BadConfigurationsNameTheFlag) {
  TrainConfig config;
  config.batch_size = 0;
  EXPECT_NE(ValidateConfig(config).message().find("--batch_size must be >= 1, got 0"), std::string::npos);
  config = TrainConfig();
  config.model = "resnet";
  EXPECT_NE(ValidateConfig(config).message().find("--model must be mlp, cnn or cnn_bn"), std::string::npos);
  config = TrainConfig();
  config.comm_hook = "int8";
  EXPECT_NE(ValidateConfig(config).message().find("--comm_hook"), std::string::npos);
  std::string output;
  EXPECT_EQ(RunCommand(Runfile("examples/train") + " --epochs=0", &output), 2);
  EXPECT_NE(output.find("--epochs must be >= 1"), std::string::npos) << output;
  output.clear();
  EXPECT_NE(RunCommand(Runfile("examples/train") + " --no_such_flag=1", &output), 0);
  EXPECT_NE(output.find("no_such_flag"), std::string::npos) << output;
  output.clear();
  EXPECT_EQ(RunCommand(Runfile("examples/train") + " --data_dir=/nonexistent --max_steps=1", &output), 1);
  EXPECT_NE(output.find("dataset-fashion-mnist"), std::string::npos) << output;
}

TEST(TrainerTest, EpochShardsPartitionThePaddedOrder) {
  for (int world : {1, 2, 3, 4}) {
    std::multiset<int64_t> seen;
    size_t count = 0;
    for (int rank = 0; rank < world; ++rank) {
      std::vector<int64_t> shard = EpochShard(10, true, 7, 1, rank, world);
      if (rank == 0) count = shard.size();
      EXPECT_EQ(shard.size(), count);  // equal counts, so every rank takes the same number of steps
      seen.insert(shard.begin(), shard.end());
    }
    for (int64_t i = 0; i < 10; ++i) EXPECT_GE(seen.count(i), 1u) << "sample " << i << " world " << world;
    EXPECT_EQ(seen.size(), (10 + world - 1) / world * world);  // padding repeats only the head
  }
  EXPECT_NE(EpochShard(100, true, 7, 1, 0, 1), EpochShard(100, true, 7, 2, 0, 1));  // new order each epoch
  EXPECT_EQ(EpochShard(5, false, 7, 1, 1, 2), (std::vector<int64_t>{1, 3, 0}));
}

TEST(TrainerTest, CosineScheduleAnnealsToZero) {
  TrainConfig config;
  config.lr = 0.1;
  EXPECT_DOUBLE_EQ(ScheduledLr(config, 0, 100), 0.1);
  EXPECT_NEAR(ScheduledLr(config, 50, 100), 0.05, 1e-12);
  config.lr_schedule = "constant";
  EXPECT_DOUBLE_EQ(ScheduledLr(config, 99, 100), 0.1);
}

// The first averaged gradients of 2-rank DDP (batch 64 per rank, file order) equal one process's
// gradients on the batch of 128: rank r takes samples r, r + 2, ..., which together are samples 0..127.
TEST(TrainerTest, DdpDumpGradsEqualOneProcessOnTheJointBatch) {
  const std::string single = TempPath("single.safetensors"), ddp = TempPath("ddp.safetensors");
  const std::string common = " --model=cnn --max_steps=1 --epochs=1 --shuffle=false --lr_schedule=constant";
  std::string output;
  ASSERT_EQ(RunCommand(Runfile("examples/train") + common + " --batch_size=128 --dump_grads=" + single, &output), 0) << output;
  ASSERT_EQ(RunCommand(absl::StrCat(Runfile("ddp/ddprun"), " --nproc_per_node=2 --master_port=0 ", Runfile("examples/train"),
                             common, " --batch_size=64 --dump_grads=", ddp),
                &output),
            0)
      << output;
  auto want = LoadSafetensors(single);
  auto got = LoadSafetensors(ddp);
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), want->size());
  for (size_t i = 0; i < got->size(); ++i) {
    ASSERT_EQ((*got)[i].first, (*want)[i].first);
    std::vector<float> a = (*got)[i].second.ToVector<float>(), b = (*want)[i].second.ToVector<float>();
    double diff = 0, scale = 1e-30;
    for (size_t j = 0; j < a.size(); ++j) {
      diff = std::max(diff, std::abs(static_cast<double>(a[j]) - b[j]));
      scale = std::max(scale, std::abs(static_cast<double>(b[j])));
    }
    EXPECT_LE(diff / scale, 1e-5) << (*got)[i].first;
  }
  EXPECT_NE(output.find("DDP step breakdown"), std::string::npos) << output;
}

}  // namespace
}  // namespace ddp
