// train/train end to end: a short run learns, flags are validated by name (the rules of
// train/train_flags.def), the loader's worker count does not change the batches, --eval_only agrees
// across world sizes, evaluating at the default batch needs no more memory than training, 2-rank DDP and
// --mode=dp write the same first gradients as one process on the joint batch, --resume and a restarted group
// continue bit for bit, rank 0's errors reach every rank, and SIGTERM stops after the step.
#include "train/trainer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "nn/resnet.h"
#include "nn/safetensors.h"
#include "nn/torch_save.h"
#include "testing/process.h"
#include "train/setup.h"
#include "train/train_step.h"

namespace ddp {
namespace {

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
  ASSERT_EQ(RunShell("cat " + config.metrics_out, &metrics), 0);
  EXPECT_NE(metrics.find("\"epoch\": 1, \"steps\": 300"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("\"test_acc\""), std::string::npos);
}

TEST(TrainerTest, BadConfigurationsNameTheFlag) {
  TrainConfig config;
  config.batch_size = 0;
  EXPECT_NE(ValidateConfig(config).message().find("--batch_size must be >= 1, got 0"), std::string::npos);
  config = TrainConfig();
  config.model = "resnet";
  EXPECT_NE(ValidateConfig(config).message().find("--model must be mlp, cnn, cnn_bn or resnet18"), std::string::npos);
  config = TrainConfig();
  config.comm_hook = "int8";
  EXPECT_NE(ValidateConfig(config).message().find("--comm_hook"), std::string::npos);
  config = TrainConfig();
  config.num_workers = -1;
  EXPECT_NE(ValidateConfig(config).message().find("--num_workers must be >= 0, got -1"), std::string::npos);
  config = TrainConfig();
  config.device = "tpu";
  EXPECT_NE(ValidateConfig(config).message().find("--device must be cpu or cuda, got \"tpu\""), std::string::npos);
  config = TrainConfig();
  config.backend = "nccl";
  EXPECT_NE(ValidateConfig(config).message().find("--backend=nccl needs --device=cuda"), std::string::npos);
#ifndef DDP_WITH_CUDA
  config = TrainConfig();
  config.device = "cuda";
  EXPECT_NE(ValidateConfig(config).message().find("--device=cuda needs a CUDA build"), std::string::npos);
#endif
  config = TrainConfig();
  config.reduce_dtype = "bf16";
  EXPECT_TRUE(ValidateConfig(config).ok());
  config.grad_as_bucket_view = true;
  EXPECT_NE(ValidateConfig(config).message().find("--grad_as_bucket_view"), std::string::npos);
#ifdef DDP_WITH_CUDA
  config = TrainConfig();
  config.reduce_dtype = "bf16";
  config.device = "cuda";
  config.backend = "nccl";
  EXPECT_TRUE(ValidateConfig(config).ok()) << "bf16 buckets on CUDA (NCCL)";
#endif
  config = TrainConfig();
  config.model = "resnet18";
  config.memory_format = "channels_last";
  EXPECT_TRUE(ValidateConfig(config).ok());
  config.model = "cnn";
  EXPECT_NE(ValidateConfig(config).message().find("--memory_format=channels_last runs resnet18 on the CPU"),
            std::string::npos);
  config.memory_format = "nhwc";
  EXPECT_NE(ValidateConfig(config).message().find("--memory_format"), std::string::npos);
  config.memory_format = "auto";  // the default: every model takes it
  EXPECT_TRUE(ValidateConfig(config).ok());
  config = TrainConfig();
  config.momentum = 1;
  EXPECT_EQ(ValidateConfig(config).message(), "--momentum must be in [0, 1), got 1");
  config = TrainConfig();
  config.lr = 0;
  EXPECT_EQ(ValidateConfig(config).message(), "--lr must be > 0, got 0");
  config = TrainConfig();
  config.fault_inject_point = "forward";
  EXPECT_EQ(ValidateConfig(config).message(),
            "--fault_inject_point must be after_step or backward, got \"forward\"");
  config = TrainConfig();
  config.eval_only = true;
  EXPECT_NE(ValidateConfig(config).message().find("--eval_only needs --init_from"), std::string::npos);
  config = TrainConfig();
  config.init_from_exclude = "fc.";
  EXPECT_NE(
      ValidateConfig(config).message().find("--init_from_exclude leaves some of --init_from's tensors out"),
      std::string::npos);
  std::string output;
  EXPECT_EQ(RunShell(Runfile("train/train") + " --epochs=0", &output), 2);
  EXPECT_NE(output.find("--epochs must be >= 1"), std::string::npos) << output;
  output.clear();
  EXPECT_NE(RunShell(Runfile("train/train") + " --no_such_flag=1", &output), 0);
  EXPECT_NE(output.find("no_such_flag"), std::string::npos) << output;
  output.clear();
  EXPECT_EQ(RunShell(Runfile("train/train") + " --data_dir=/nonexistent --max_steps=1", &output), 1);
  EXPECT_NE(output.find("dataset-fashion-mnist"), std::string::npos) << output;
}

// The loader delivers the sampler's batches in order whatever its worker count: the first gradients are
// bit-identical with 0 and 3 worker threads (shuffled order, so the DistributedSampler is in play). The
// second run dumps them in torch.save's format, which holds the same values.
TEST(TrainerTest, WorkerCountDoesNotChangeTheBatches) {
  const std::string inline_grads = TempPath("grads_w0.safetensors"), worker_grads = TempPath("grads_w3.pt");
  const std::string common = " --model=mlp --max_steps=1 --epochs=1 --seed=5";
  std::string output;
  ASSERT_EQ(RunShell(Runfile("train/train") + common + " --num_workers=0 --dump_grads=" + inline_grads, &output), 0)
      << output;
  ASSERT_EQ(RunShell(Runfile("train/train") + common + " --num_workers=3 --dump_grads=" + worker_grads, &output), 0)
      << output;
  auto a = LoadSafetensors(inline_grads);
  auto b = ReadTorchStateDict(worker_grads);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->size(), b->tensors.size());
  for (size_t i = 0; i < a->size(); ++i) {
    EXPECT_EQ((*a)[i].first, b->tensors[i].first);
    EXPECT_EQ((*a)[i].second.ToVector<float>(), b->tensors[i].second.ToVector<float>()) << (*a)[i].first;
  }
}

// Reads "final test_acc A test_loss L" from a run's output.
std::pair<double, double> FinalMetrics(const std::string& output) {
  const size_t at = output.find("final test_acc ");
  if (at == std::string::npos) return {-1, -1};
  double acc = -1, loss = -1;
  std::sscanf(output.c_str() + at, "final test_acc %lf test_loss %lf", &acc, &loss);
  return {acc, loss};
}

// --eval_only evaluates saved weights on the whole test set under any world size with the same result
// as one process (the evaluation sampler and one all-reduce: no sample dropped or counted twice).
TEST(TrainerTest, EvalOnlyGivesTheSameAccuracyUnderAnyWorldSize) {
  const std::string weights = TempPath("eval_weights.safetensors");
  std::string output;
  ASSERT_EQ(RunShell(Runfile("train/train") + " --model=mlp --epochs=1 --max_steps=40 --save=" + weights, &output), 0)
      << output;
  const std::string eval = " --model=mlp --eval_only --eval_batch_size=333 --init_from=" + weights;
  output.clear();
  ASSERT_EQ(RunShell(Runfile("train/train") + eval, &output), 0) << output;
  const auto single = FinalMetrics(output);
  ASSERT_GT(single.first, 0.3) << output;
  EXPECT_NE(output.find("over 10000 samples on 1 rank(s)"), std::string::npos) << output;
  for (int world : {2, 3}) {
    output.clear();
    ASSERT_EQ(RunShell(absl::StrCat(Runfile("launch/ddprun"), " --nproc_per_node=", world, " --master_port=0 ",
                                      Runfile("train/train"), eval),
                         &output),
              0)
        << output;
    const auto distributed = FinalMetrics(output);
    EXPECT_DOUBLE_EQ(distributed.first, single.first) << output;
    EXPECT_NEAR(distributed.second, single.second, 1e-4) << output;
    EXPECT_NE(output.find(absl::StrCat("over 10000 samples on ", world, " rank(s)")), std::string::npos) << output;
  }
}

// The number after `"key": ` in a --metrics_out record; -1 when absent.
double MetricOf(const std::string& record, const std::string& key) {
  const size_t at = record.find("\"" + key + "\": ");
  double value = -1;
  if (at != std::string::npos) std::sscanf(record.c_str() + at + key.size() + 4, "%lf", &value);
  return value;
}

// The evaluation runs --batch_size samples at a time unless told otherwise, so the epoch's peak memory is
// the training loop's; a larger --eval_batch_size shows up in the epoch record's peak_rss_mb (the cnn at
// 2000: about 200 MiB above training) and gives the same metrics.
TEST(TrainerTest, EvaluationAtTheDefaultBatchTakesNoMoreMemoryThanTraining) {
  std::string records[2];
  const char* eval_flags[2] = {"", " --eval_batch_size=2000"};
  for (int i = 0; i < 2; ++i) {
    const std::string metrics = TempPath(absl::StrCat("eval_memory_", i, ".jsonl"));
    std::remove(metrics.c_str());
    std::string output;
    ASSERT_EQ(RunShell(Runfile("train/train") +
                           " --model=cnn --epochs=1 --max_steps=3 --metrics_out=" + metrics + eval_flags[i],
                       &output),
              0)
        << output;
    EXPECT_NE(output.find("; peak RSS "), std::string::npos) << output;
    ASSERT_EQ(RunShell("cat " + metrics, &records[i]), 0);
  }
  const double training = MetricOf(records[0], "training_peak_rss_mb");
  ASSERT_GT(training, 60) << records[0];  // the data sets' pixels alone are 55 MB
  EXPECT_LE(MetricOf(records[0], "peak_rss_mb"), training * 1.02 + 4) << records[0];
  EXPECT_GT(MetricOf(records[1], "peak_rss_mb"), MetricOf(records[1], "training_peak_rss_mb") + 100)
      << records[1];
  EXPECT_EQ(MetricOf(records[1], "test_acc"), MetricOf(records[0], "test_acc"));
  EXPECT_NEAR(MetricOf(records[1], "test_loss"), MetricOf(records[0], "test_loss"), 1e-5);
}

TEST(TrainerTest, FlagRulesDescribeWhatTheyWant) {
  EXPECT_EQ(FlagRule::Any().Check(std::string("x")), "");
  EXPECT_EQ(FlagRule::AtLeast(1).Check(int64_t{1}), "");
  EXPECT_EQ(FlagRule::AtLeast(1).Check(0), "must be >= 1, got 0");
  EXPECT_EQ(FlagRule::Above(0).Check(0.0), "must be > 0, got 0");
  EXPECT_EQ(FlagRule::Above(0).Check(std::nan("")), "must be > 0, got nan");
  EXPECT_EQ(FlagRule::InRange(0, 1).Check(0.5), "");
  EXPECT_EQ(FlagRule::InRange(0, 1).Check(-0.5), "must be in [0, 1), got -0.5");
  EXPECT_EQ(FlagRule::Between(1, 1024).Check(1024), "");
  EXPECT_EQ(FlagRule::Between(1, 1024).Check(1025), "must be in [1, 1024], got 1025");
  EXPECT_EQ(FlagRule::OneOf({"a", "b", "c"}).Check(std::string("d")), "must be a, b or c, got \"d\"");
  EXPECT_EQ(FlagRule::OneOf({"a", "b"}).Check(std::string("b")), "");
  EXPECT_NE(FlagRule::OneOf({"a"}).Check(1), "") << "a string rule on a number rejects it";
  EXPECT_EQ(TrainConfig().model, "cnn");  // the table's defaults are TrainConfig's
  EXPECT_EQ(TrainConfig().bucket_cap_mb, "25");
  EXPECT_TRUE(ValidateConfig(TrainConfig()).ok());
}

TEST(TrainerTest, CosineScheduleAnnealsToZero) {
  TrainConfig config;
  config.lr = 0.1;
  EXPECT_DOUBLE_EQ(ScheduledLr(config, 0, 100), 0.1);
  EXPECT_NEAR(ScheduledLr(config, 50, 100), 0.05, 1e-12);
  config.lr_schedule = "constant";
  EXPECT_DOUBLE_EQ(ScheduledLr(config, 99, 100), 0.1);
}

// --warmup_steps=W: lr/W, 2lr/W, ..., lr over the first W steps, then the schedule over the rest.
TEST(TrainerTest, LinearWarmupThenCosineOverTheRemainingSteps) {
  TrainConfig config;
  config.lr = 0.1;
  config.warmup_steps = 10;
  EXPECT_NEAR(ScheduledLr(config, 0, 110), 0.01, 1e-12);
  EXPECT_NEAR(ScheduledLr(config, 4, 110), 0.05, 1e-12);
  EXPECT_NEAR(ScheduledLr(config, 9, 110), 0.1, 1e-12);
  EXPECT_NEAR(ScheduledLr(config, 10, 110), 0.1, 1e-12);  // cosine starts at lr
  EXPECT_NEAR(ScheduledLr(config, 60, 110), 0.05, 1e-12);  // halfway through the 100 annealed steps
  config.lr_schedule = "constant";
  EXPECT_NEAR(ScheduledLr(config, 3, 110), 0.04, 1e-12);
  EXPECT_DOUBLE_EQ(ScheduledLr(config, 50, 110), 0.1);
}

// Max over tensors of max |a - b| / max |b| between two gradient files with the same names.
double MaxRelativeDifference(const std::string& got_path, const std::string& want_path) {
  auto want = LoadSafetensors(want_path);
  auto got = LoadSafetensors(got_path);
  EXPECT_TRUE(want.ok()) << want.status();
  EXPECT_TRUE(got.ok()) << got.status();
  if (!want.ok() || !got.ok() || got->size() != want->size()) return 1e30;
  double worst = 0;
  for (size_t i = 0; i < got->size(); ++i) {
    EXPECT_EQ((*got)[i].first, (*want)[i].first);
    std::vector<float> a = (*got)[i].second.ToVector<float>(), b = (*want)[i].second.ToVector<float>();
    double diff = 0, scale = 1e-30;
    for (size_t j = 0; j < a.size(); ++j) {
      diff = std::max(diff, std::abs(static_cast<double>(a[j]) - b[j]));
      scale = std::max(scale, std::abs(static_cast<double>(b[j])));
    }
    worst = std::max(worst, diff / scale);
  }
  return worst;
}

const char kOneStep[] = " --model=cnn --max_steps=1 --epochs=1 --shuffle=false --lr_schedule=constant";

// The first averaged gradients of 2-rank DDP (batch 64 per rank, file order) equal one process's
// gradients on the batch of 128: rank r takes samples r, r + 2, ..., which together are samples 0..127.
TEST(TrainerTest, DdpDumpGradsEqualOneProcessOnTheJointBatch) {
  const std::string single = TempPath("single.safetensors"), ddp = TempPath("ddp.safetensors");
  std::string output;
  ASSERT_EQ(RunShell(Runfile("train/train") + kOneStep + " --batch_size=128 --dump_grads=" + single, &output), 0)
      << output;
  ASSERT_EQ(RunShell(absl::StrCat(Runfile("launch/ddprun"), " --nproc_per_node=2 --master_port=0 ",
                                    Runfile("train/train"), kOneStep, " --batch_size=64 --dump_grads=", ddp),
                       &output),
            0)
      << output;
  EXPECT_LE(MaxRelativeDifference(ddp, single), 1e-5);
  EXPECT_NE(output.find("DDP step breakdown"), std::string::npos) << output;
}

// --mode=dp splits the batch of 128 over 3 CPU workers (43 + 43 + 42); the summed gradients equal one
// process's on the whole batch.
TEST(TrainerTest, DataParallelDumpGradsEqualOneProcess) {
  const std::string single = TempPath("single_dp.safetensors"), dp = TempPath("dp.safetensors");
  std::string output;
  ASSERT_EQ(RunShell(Runfile("train/train") + kOneStep + " --batch_size=128 --dump_grads=" + single, &output), 0)
      << output;
  ASSERT_EQ(RunShell(Runfile("train/train") + kOneStep + " --batch_size=128 --mode=dp --dp_devices=3 --dump_grads=" + dp,
                       &output),
            0)
      << output;
  EXPECT_LE(MaxRelativeDifference(dp, single), 1e-5);
  EXPECT_NE(output.find("DataParallel: 3 CPU workers"), std::string::npos) << output;
  output.clear();
  EXPECT_EQ(RunShell(Runfile("train/train") + " --mode=dq", &output), 2);
  EXPECT_NE(output.find("--mode must be auto or dp"), std::string::npos) << output;
  output.clear();
  EXPECT_EQ(RunShell(Runfile("train/train") + " --mode=dp --adapt_threads", &output), 2);
  EXPECT_NE(output.find("--adapt_threads runs in the step loop's thread"), std::string::npos) << output;
}

// --adapt_threads trains through its first probe (steps 5-8 at one thread, then the faster count) and
// ends with a test accuracy, as a run at a fixed count does (the count it keeps depends on the machine's
// load: train/adaptive_threads_test.cc tests the choice).
TEST(TrainerTest, AdaptiveThreadsTrainsThroughItsProbes) {
  std::string output;
  ASSERT_EQ(
      RunShell(Runfile("train/train") + " --model=mlp --max_steps=20 --epochs=1 --threads=2 --adapt_threads",
               &output),
      0)
      << output;
  EXPECT_NE(output.find("final test_acc"), std::string::npos) << output;
}

// --mode=dp under --precision=bf16 and fp16 (with its loss scaler): DataParallel's workers run the
// replicas under the step's autocast scope, so the summed gradients equal one process's of the same
// precision on the whole batch up to the order of the sums, and are far from the float32 gradients. The
// batch of 192 gives each of the 3 replicas 64 rows: where a replica's GEMM has a row count the library
// blocks differently from the whole batch's (43 of 128, say), oneDNN's sgemm on some CPUs (an AVX2 EPYC of
// family 25) sums some rows in another order, and a last float32 bit that flips a value's rounding to fp16
// moves every gradient that multiplies it by an fp16 ulp of one term, more than summation order alone.
TEST(TrainerTest, DataParallelUnderAutocastEqualsOneProcessOfTheSamePrecision) {
  const std::string fp32 = TempPath("single_fp32.safetensors");
  std::string output;
  ASSERT_EQ(RunShell(Runfile("train/train") + kOneStep + " --batch_size=192 --dump_grads=" + fp32, &output),
            0)
      << output;
  for (const std::string precision : {"bf16", "fp16"}) {
    const std::string single = TempPath("single_" + precision + ".safetensors");
    const std::string dp = TempPath("dp_" + precision + ".safetensors");
    const std::string common = kOneStep + std::string(" --batch_size=192 --precision=") + precision;
    output.clear();
    ASSERT_EQ(RunShell(Runfile("train/train") + common + " --dump_grads=" + single, &output), 0) << output;
    output.clear();
    ASSERT_EQ(
        RunShell(Runfile("train/train") + common + " --mode=dp --dp_devices=3 --dump_grads=" + dp, &output),
        0)
        << output;
    EXPECT_LE(MaxRelativeDifference(dp, single), 1e-5) << precision;
    EXPECT_GE(MaxRelativeDifference(dp, fp32), 1e-3) << precision << ": the replicas ran in float32";
  }
}

// A run stopped after a checkpoint and resumed with --resume ends with exactly the weights of an
// uninterrupted run (bit for bit), across an epoch boundary; resuming under 2 ranks also works.
TEST(TrainerTest, ResumeContinuesBitForBit) {
  const std::string common =
      " --model=mlp --lr_schedule=constant --epochs=2 --batch_size=256 --max_steps=300";  // 235 steps per epoch
  const std::string whole = TempPath("whole.safetensors"), resumed = TempPath("resumed.safetensors");
  const std::string dir = TempPath("resume_checkpoints");
  std::string output;
  ASSERT_EQ(RunShell(Runfile("train/train") + common + " --save=" + whole, &output), 0) << output;
  // The "interrupted" run: the same flags, stopped after step 150 (its last checkpoint).
  ASSERT_EQ(RunShell(Runfile("train/train") + " --model=mlp --lr_schedule=constant --epochs=2 --batch_size=256"
                       " --max_steps=150 --checkpoint_every=50 --keep_checkpoints=2 --checkpoint_dir=" + dir, &output),
            0) << output;
  std::string listing;
  ASSERT_EQ(RunShell("ls " + dir, &listing), 0);
  EXPECT_EQ(listing, "latest\nstep-100\nstep-150\n") << "--keep_checkpoints=2 keeps the newest two";
  output.clear();
  ASSERT_EQ(RunShell(Runfile("train/train") + common + " --resume --checkpoint_dir=" + dir + " --save=" + resumed,
                       &output), 0) << output;
  EXPECT_NE(output.find("resuming from"), std::string::npos) << output;
  EXPECT_NE(output.find("step 150, epoch 1, 38400 samples"), std::string::npos) << output;
  std::string diff;
  EXPECT_EQ(RunShell("cmp " + whole + " " + resumed, &diff), 0) << diff;
  output.clear();
  ASSERT_EQ(RunShell(absl::StrCat(Runfile("launch/ddprun"), " --nproc_per_node=2 --master_port=0 ",
                                    Runfile("train/train"), common, " --resume --checkpoint_dir=", dir),
                       &output), 0) << output;
  EXPECT_NE(output.find("[rank 0] resuming from"), std::string::npos) << output;
  output.clear();
  EXPECT_EQ(RunShell(Runfile("train/train") + " --resume", &output), 2);
  EXPECT_NE(output.find("--resume and --checkpoint_every need --checkpoint_dir"), std::string::npos) << output;
}

// Fault tolerance end to end: under ddprun --max_restarts=1, rank 1 is SIGKILLed after step 70; the
// group restarts, resumes from the step-40 checkpoint and finishes with exactly the weights of an
// undisturbed 2-rank run (so every sample after the checkpoint was seen exactly once). The undisturbed
// run also checks replica sync every 30 steps.
TEST(TrainerTest, KilledWorkerRestartsAndResumesBitForBit) {
  const std::string common =
      " --model=mlp --lr_schedule=constant --epochs=1 --batch_size=128 --max_steps=120 --checkpoint_every=40";
  const std::string undisturbed = TempPath("undisturbed.safetensors"), restarted = TempPath("restarted.safetensors");
  std::string output;
  ASSERT_EQ(RunShell(absl::StrCat(Runfile("launch/ddprun"), " --nproc_per_node=2 --master_port=0 ",
                                    Runfile("train/train"), common, " --check_sync_every=30 --checkpoint_dir=",
                                    TempPath("ck_undisturbed"), " --save=", undisturbed),
                       &output), 0) << output;
  output.clear();
  ASSERT_EQ(RunShell(absl::StrCat(Runfile("launch/ddprun"), " --nproc_per_node=2 --master_port=0 --max_restarts=1 ",
                                    Runfile("train/train"), common, " --resume --fault_inject_step=70",
                                    " --checkpoint_dir=", TempPath("ck_restarted"), " --save=", restarted),
                       &output), 0) << output;
  EXPECT_NE(output.find("rank 1 kills itself after step 70"), std::string::npos) << output;
  EXPECT_NE(output.find("restarting the worker group (restart 1 of 1)"), std::string::npos) << output;
  EXPECT_NE(output.find("resuming from"), std::string::npos) << output;
  EXPECT_NE(output.find("step 40, epoch 1"), std::string::npos) << output;
  std::string diff;
  EXPECT_EQ(RunShell("cmp " + undisturbed + " " + restarted, &diff), 0) << diff;
}

// Rank-0-only work that fails (here: the start-up probe of --save and --metrics_out, which rank 0 writes,
// into a missing directory) fails every rank at once with rank 0's error, instead of leaving the others
// waiting at a barrier.
TEST(TrainerTest, RankZeroSaveErrorReachesEveryRank) {
  std::string output;
  EXPECT_EQ(RunShell(absl::StrCat(Runfile("launch/ddprun"), " --nproc_per_node=2 --master_port=0 ",
                                    Runfile("train/train"),
                                    " --model=mlp --max_steps=3 --save=/nonexistent_dir/weights.safetensors"),
                       &output),
            1)
      << output;
  const std::string error =
      "train: NOT_FOUND: rank 0: --save=/nonexistent_dir/weights.safetensors: cannot create files in "
      "/nonexistent_dir: No such file or directory";
  // Every rank learns rank 0's error; whichever rank exits first makes ddprun stop the other, which may
  // then end on that SIGTERM before printing the error itself.
  EXPECT_TRUE(output.find("[rank 0] " + error) != std::string::npos ||
              output.find("[rank 1] " + error) != std::string::npos)
      << output;
  EXPECT_NE(output.find("ddprun: last 1 line(s) of rank "), std::string::npos) << output;
  EXPECT_NE(output.find("  | " + error), std::string::npos) << output;
  // The per-epoch report (progress line and --metrics_out) is rank-0-only work too.
  output.clear();
  EXPECT_EQ(RunShell(absl::StrCat(Runfile("launch/ddprun"), " --nproc_per_node=2 --master_port=0 ",
                                  Runfile("train/train"),
                                  " --model=mlp --max_steps=3 --metrics_out=/nonexistent_dir/metrics.jsonl"),
                     &output),
            1)
      << output;
  EXPECT_NE(output.find("] train: NOT_FOUND: rank 0: --metrics_out=/nonexistent_dir/metrics.jsonl: cannot "
                        "create files in /nonexistent_dir: No such file or directory"),
            std::string::npos)
      << output;
}

// The first SIGTERM stops training after the current step (exit 143, saying at which step); it does not
// kill the process in the middle of a step. The signal goes once epoch 1's line shows training runs.
TEST(TrainerTest, SigtermStopsAfterTheCurrentStep) {
  const std::string log = ::testing::TempDir() + "/sigterm_train.log";
  std::remove(log.c_str());
  auto train = BackgroundProcess::Start({Runfile("train/train"), "--model=mlp", "--epochs=20"}, {}, log);
  ASSERT_NE(train, nullptr);
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  while (train->Output().find("epoch 1: train_loss") == std::string::npos) {
    ASSERT_LT(absl::Now(), deadline) << "no epoch line within 120 s:\n" << train->Output();
    ASSERT_FALSE(train->Wait(absl::Milliseconds(50)).has_value()) << train->Output();
  }
  const absl::Time signalled = absl::Now();
  train->Signal(SIGTERM);
  const std::optional<int> exit_code = train->Wait(absl::Seconds(60));
  const std::string err = train->Output();
  ASSERT_TRUE(exit_code.has_value()) << "still running 60 s after SIGTERM:\n" << err;
  EXPECT_EQ(*exit_code, 128 + SIGTERM) << err;
  EXPECT_NE(err.find("train: SIGTERM received, stopping after the current step"), std::string::npos) << err;
  EXPECT_NE(err.find("train: CANCELLED: stopped by SIGTERM after step "), std::string::npos) << err;
  EXPECT_LT(absl::Now() - signalled, absl::Seconds(10));
}

// --memory_format=auto keeps resnet18's activations channels-last under bf16 on the CPU only; the explicit
// values hold whatever the precision.
TEST(TrainerTest, AutoMemoryFormatIsChannelsLastForResNetUnderBf16OnTheCpu) {
  EXPECT_EQ(TrainConfig().memory_format, "auto");
  const struct {
    const char *model, *precision, *device, *memory_format;
    bool channels_last;
  } cases[] = {
      {"mlp", "fp32", "cpu", "auto", false},
      {"resnet18", "fp32", "cpu", "auto", false},
      {"resnet18", "bf16", "cpu", "auto", true},
      {"resnet18", "fp16", "cpu", "auto", false},
      {"resnet18", "bf16", "cuda", "auto", false},
      {"cnn", "bf16", "cpu", "auto", false},
      {"resnet18", "bf16", "cpu", "contiguous", false},
      {"resnet18", "fp32", "cpu", "channels_last", true},
  };
  TrainConfig config;
  for (const auto& c : cases) {
    config.model = c.model;
    config.precision = c.precision;
    config.device = c.device;
    config.memory_format = c.memory_format;
    EXPECT_EQ(ChannelsLastActivations(config), c.channels_last)
        << c.model << " " << c.precision << " on " << c.device << ", --memory_format=" << c.memory_format;
    EXPECT_EQ(ResolvedMemoryFormat(config), c.channels_last ? "channels_last" : "contiguous");
  }
  config.device = "cpu";
  config.model = "resnet18";
  // train/train's model follows it.
  for (const char* precision : {"bf16", "fp32"}) {
    config.memory_format = "auto";
    config.precision = precision;
    absl::StatusOr<std::shared_ptr<Module>> model = BuildModel(config, Device::CPU());
    ASSERT_TRUE(model.ok()) << model.status();
    auto* resnet = dynamic_cast<nn::ResNet*>(model->get());
    ASSERT_NE(resnet, nullptr);
    EXPECT_EQ(resnet->channels_last(), config.precision == "bf16") << precision;
  }
}

}  // namespace
}  // namespace ddp
