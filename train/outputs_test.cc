// Nothing overwritten, nothing lost at the end, train/train as a process: --resume
// finds the newest complete step when dir/latest is missing; a run refuses to overwrite checkpoints
// unless told to; every output path is probed before the first step (every rank fails at once, with the
// errno text, leaving no probe file behind); --eval_only writes --metrics_out; images the model cannot
// take fail at start-up naming both shapes; a resume with nothing left to train evaluates, and an empty
// test set says there is nothing to evaluate; --threads and ddprun's --nproc_per_node are bounded.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "testing/process.h"

namespace ddp {
namespace {

const char kFashionMnist[] = "/usr/share/datasets/fashion-mnist";
// 235 steps per epoch at batch 256; few steps keep each run to a second or two.
const char kShort[] = " --model=mlp --lr_schedule=constant --epochs=1 --batch_size=256";

std::string Train() { return Runfile("train/train"); }
std::string Ddprun2() { return Runfile("launch/ddprun") + " --nproc_per_node=2 --master_port=0 "; }

// A fresh, empty directory under the test's scratch space.
std::string FreshDir(const std::string& name) {
  const std::string dir = TempPath(name);
  std::string ignored;
  EXPECT_EQ(RunShell("rm -rf " + dir + " && mkdir -p " + dir, &ignored), 0) << ignored;
  return dir;
}

// `ls -A dir`, one name a line.
std::string Listing(const std::string& dir) {
  std::string listing;
  EXPECT_EQ(RunShell("ls -A " + dir, &listing), 0) << listing;
  return listing;
}

// Runs `command`; returns its exit code, its output in `*output` (replaced).
int RunCommand(const std::string& command, std::string* output) {
  output->clear();
  return RunShell(command, output);
}

bool Has(const std::string& output, const std::string& text) {
  return output.find(text) != std::string::npos;
}

// Under `ddprun --nproc_per_node=2`, where both ranks fail at start-up with `error`: at least one rank
// printed it, and each rank printed it or was stopped by ddprun (as torchrun stops the other workers)
// because the other rank failed first. Which a rank shows is a race between reaching its error and the
// launcher's SIGTERM; both end the run without training.
bool BothRanksFailedWith(const std::string& output, const std::string& error) {
  bool printed[2], stopped[2];
  for (int rank = 0; rank < 2; ++rank) {
    const std::string tag = "[rank " + std::to_string(rank) + "] ";
    printed[rank] = Has(output, tag + error);
    stopped[rank] =
        Has(output, tag + "train: SIGTERM before training started") &&
        Has(output, "ddprun: rank " + std::to_string(1 - rank) + " failed first with exit code 1");
  }
  return (printed[0] || printed[1]) && (printed[0] || stopped[0]) && (printed[1] || stopped[1]);
}

void WriteBigEndian(std::ofstream& out, uint32_t value) {
  const char bytes[4] = {static_cast<char>(value >> 24), static_cast<char>(value >> 16),
                         static_cast<char>(value >> 8), static_cast<char>(value)};
  out.write(bytes, 4);
}

// Writes `count` images of rows x cols and their labels (0..9 in turn) as the uncompressed IDX files
// dir/<prefix>-images-idx3-ubyte and dir/<prefix>-labels-idx1-ubyte.
void WriteIdxSplit(const std::string& dir, const std::string& prefix, uint32_t count, uint32_t rows,
                   uint32_t cols) {
  std::ofstream images(dir + "/" + prefix + "-images-idx3-ubyte", std::ios::binary);
  for (uint32_t value : {0x803u, count, rows, cols}) WriteBigEndian(images, value);
  images << std::string(static_cast<size_t>(count) * rows * cols, '\x40');
  std::ofstream labels(dir + "/" + prefix + "-labels-idx1-ubyte", std::ios::binary);
  for (uint32_t value : {0x801u, count}) WriteBigEndian(labels, value);
  for (uint32_t i = 0; i < count; ++i) labels.put(static_cast<char>(i % 10));
}

// A data directory with Fashion-MNIST's training set and a test set of `count` images of rows x cols.
std::string DataDirWithTestSet(const std::string& name, uint32_t count, uint32_t rows, uint32_t cols) {
  const std::string dir = FreshDir(name);
  std::string output;
  EXPECT_EQ(RunShell(absl::StrCat("ln -s ", kFashionMnist, "/train-images-idx3-ubyte.gz ", kFashionMnist,
                                  "/train-labels-idx1-ubyte.gz ", dir),
                     &output),
            0)
      << output;
  WriteIdxSplit(dir, "t10k", count, rows, cols);
  return dir;
}

// What `stat -c %F` says `path` is ("regular file", "fifo", "character special file", ...).
std::string FileType(const std::string& path) {
  std::string type;
  RunShell("stat -c %F " + path, &type);
  return type;
}

// With dir/latest gone, --resume must not say "no checkpoint ... starting fresh" and overwrite the
// complete steps: it scans, says which step it took, and continues from it.
TEST(OutputsTest, ResumeScansForTheNewestStepWhenLatestIsMissing) {
  const std::string dir = FreshDir("scan_checkpoints");
  std::string output;
  ASSERT_EQ(
      RunCommand(Train() + kShort + " --max_steps=40 --checkpoint_every=20 --checkpoint_dir=" + dir, &output),
      0)
      << output;
  ASSERT_EQ(std::remove((dir + "/latest").c_str()), 0);
  ASSERT_EQ(
      RunCommand(Train() + kShort + " --max_steps=60 --checkpoint_every=20 --resume --checkpoint_dir=" + dir,
                 &output),
      0)
      << output;
  EXPECT_TRUE(
      Has(output, "--resume: " + dir + "/latest does not exist; took step-40, the newest complete step"))
      << output;
  EXPECT_TRUE(Has(output, "resuming from " + dir + "/step-40: step 40")) << output;
  EXPECT_EQ(Listing(dir), "latest\nstep-20\nstep-40\nstep-60\n");
}

// A run that saves checkpoints into a directory holding newer steps than its own first step refuses,
// naming the directory and the steps, and changes nothing; --overwrite_checkpoints replaces them.
TEST(OutputsTest, ARunRefusesToOverwriteCheckpointsUnlessTold) {
  const std::string dir = FreshDir("guarded_checkpoints");
  const std::string run = Train() + kShort + " --max_steps=40 --checkpoint_every=20 --checkpoint_dir=" + dir;
  std::string output;
  ASSERT_EQ(RunCommand(run, &output), 0) << output;
  const std::string before = Listing(dir);
  EXPECT_EQ(RunCommand(run, &output), 1) << output;
  EXPECT_TRUE(Has(output, "train: ALREADY_EXISTS: --checkpoint_dir=" + dir +
                              " already holds step-20, step-40, newer than step 0 where this run starts"))
      << output;
  EXPECT_TRUE(Has(output, "--overwrite_checkpoints")) << output;
  EXPECT_FALSE(Has(output, "epoch 1")) << "refused before the first step: " << output;
  EXPECT_EQ(Listing(dir), before);
  // Under DDP rank 0 decides and every rank fails with its error.
  EXPECT_EQ(RunCommand(Ddprun2() + run, &output), 1) << output;
  EXPECT_TRUE(Has(output, "[rank 1] train: ALREADY_EXISTS: rank 0: --checkpoint_dir=" + dir)) << output;
  ASSERT_EQ(RunCommand(run + " --max_steps=20 --overwrite_checkpoints", &output), 0) << output;
  EXPECT_TRUE(Has(output, "--overwrite_checkpoints: removed step-20, step-40 from " + dir)) << output;
  EXPECT_EQ(Listing(dir), "latest\nstep-20\n");
}

// Each bad output path fails at once (no step taken), naming the flag, the path and the errno text.
TEST(OutputsTest, BadOutputPathsFailBeforeTheFirstStep) {
  const std::string dir = FreshDir("bad_outputs");
  const std::string file = dir + "/a_file";
  std::string output;
  ASSERT_EQ(RunCommand("touch " + file, &output), 0);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {" --metrics_out=/nonexistent_dir/m.jsonl",
       "NOT_FOUND: --metrics_out=/nonexistent_dir/m.jsonl: cannot create files in /nonexistent_dir: No such "
       "file or "
       "directory"},
      {" --save=/nonexistent_dir/w.safetensors",
       "NOT_FOUND: --save=/nonexistent_dir/w.safetensors: cannot create files in /nonexistent_dir: No such "
       "file or "
       "directory"},
      {" --save=" + dir,
       "--save=" + dir + ": cannot write " + dir + ": it is a directory, not a regular file"},
      {" --dump_grads=" + file + "/g.safetensors", "cannot create files in " + file + ": Not a directory"},
      {" --checkpoint_every=10 --checkpoint_dir=" + file + "/ck",
       "--checkpoint_dir=" + file + "/ck: cannot create directory " + file + "/ck: Not a directory"},
  };
  for (const auto& [flags, error] : cases) {
    EXPECT_EQ(RunCommand(Train() + kShort + " --max_steps=5" + flags, &output), 1) << flags << "\n" << output;
    EXPECT_TRUE(Has(output, error)) << flags << "\n" << output;
    EXPECT_FALSE(Has(output, "epoch 1")) << flags << "\n" << output;
  }
  EXPECT_EQ(Listing(dir), "a_file\n") << "no probe file left behind";
}

// Under DDP rank 0 probes (it writes the files) and every rank fails at once with its error (or, where
// ddprun's stop after rank 0's failure comes first, is stopped); --trace_out exists only under DDP.
TEST(OutputsTest, UnderDdpEveryRankFailsWithRankZerosProbeError) {
  std::string output;
  EXPECT_EQ(
      RunCommand(Ddprun2() + Train() + kShort + " --max_steps=5 --trace_out=/nonexistent_dir/trace.json",
                 &output),
      1)
      << output;
  const std::string error =
      "train: NOT_FOUND: rank 0: --trace_out=/nonexistent_dir/trace.json: cannot create files in "
      "/nonexistent_dir: No such file or directory";
  EXPECT_TRUE(BothRanksFailedWith(output, error)) << output;
  EXPECT_FALSE(Has(output, "epoch 1")) << output;
}

// Good outputs are written and nothing else is left beside them; an existing metrics file is appended to.
TEST(OutputsTest, ProbesLeaveNothingBehind) {
  const std::string dir = FreshDir("good_outputs");
  std::string output;
  ASSERT_EQ(RunCommand("echo '{\"earlier\": 1}' > " + dir + "/metrics.jsonl", &output), 0);
  ASSERT_EQ(RunCommand(Train() + kShort + " --max_steps=5 --metrics_out=" + dir + "/metrics.jsonl --save=" +
                           dir + "/w.safetensors --dump_grads=" + dir + "/g.safetensors",
                       &output),
            0)
      << output;
  EXPECT_EQ(Listing(dir), "g.safetensors\nmetrics.jsonl\nw.safetensors\n");
  std::string metrics;
  ASSERT_EQ(RunCommand("cat " + dir + "/metrics.jsonl", &metrics), 0);
  EXPECT_EQ(metrics.rfind("{\"earlier\": 1}\n{\"epoch\": 1, \"steps\": 5, ", 0), 0u) << metrics;
}

// The "test_acc" value of a metrics line ("" when absent).
std::string TestAcc(const std::string& line) {
  const size_t at = line.find("\"test_acc\": ");
  if (at == std::string::npos) return "";
  return line.substr(at, line.find(',', at) - at);
}

// --eval_only must not ignore --metrics_out.
TEST(OutputsTest, EvalOnlyWritesOneMetricsLine) {
  const std::string dir = FreshDir("eval_only_metrics");
  std::string output;
  ASSERT_EQ(RunCommand(Train() + kShort + " --max_steps=20 --save=" + dir + "/w.safetensors", &output), 0)
      << output;
  const std::string eval = Train() + " --model=mlp --eval_only --init_from=" + dir +
                           "/w.safetensors --metrics_out=" + dir + "/eval.jsonl";
  ASSERT_EQ(RunCommand(eval, &output), 0) << output;
  ASSERT_EQ(RunCommand(Ddprun2() + eval, &output), 0) << output;
  std::string metrics;
  ASSERT_EQ(RunCommand("cat " + dir + "/eval.jsonl", &metrics), 0);
  const size_t newline = metrics.find('\n');
  ASSERT_NE(newline, std::string::npos) << metrics;
  const std::string first = metrics.substr(0, newline), second = metrics.substr(newline + 1);
  EXPECT_EQ(first.rfind("{\"test_loss\": ", 0), 0u) << metrics;
  EXPECT_TRUE(Has(first, "\"test_acc\": ")) << metrics;
  EXPECT_TRUE(Has(first, "\"samples\": 10000, \"world_size\": 1}")) << metrics;
  EXPECT_EQ(TestAcc(second), TestAcc(first)) << "the same evaluation under 2 ranks: " << metrics;
  EXPECT_TRUE(Has(second, "\"samples\": 10000, \"world_size\": 2}\n")) << metrics;
}

// 14x56 images fail at start-up, not after training the cnn a whole epoch and aborting in evaluation with
// nothing saved.
TEST(OutputsTest, ImagesTheModelCannotTakeFailAtStartUp) {
  const std::string data = DataDirWithTestSet("data_14x56", 20, 14, 56);
  std::string output;
  EXPECT_EQ(RunCommand(Train() + " --model=cnn --epochs=1 --max_steps=5 --data_dir=" + data, &output), 1)
      << output;
  EXPECT_TRUE(Has(output,
                  "train: INVALID_ARGUMENT: the test set's images are [1, 14, 56] but --model=cnn was built "
                  "for --dataset=fashion_mnist's [1, 28, 28] (in " +
                      data + ")"))
      << output;
  EXPECT_FALSE(Has(output, "epoch 1")) << output;
  // The mlp's 784 inputs would take 14 * 56 pixels without a word; they are not the model's images either.
  EXPECT_EQ(
      RunCommand(Train() + " --model=mlp --eval_only --init_from=/nonexistent --data_dir=" + data, &output),
      1);
  EXPECT_TRUE(Has(output, "the test set's images are [1, 14, 56] but --model=mlp was built for")) << output;
}

// A resume with nothing left to train evaluates, instead of printing "final test_acc 0.0000" without
// evaluating.
TEST(OutputsTest, ResumeWithNothingLeftToTrainEvaluates) {
  const std::string dir = FreshDir("nothing_left");
  std::string output;
  ASSERT_EQ(
      RunCommand(Train() + kShort + " --max_steps=40 --checkpoint_every=40 --checkpoint_dir=" + dir, &output),
      0)
      << output;
  const size_t at = output.find("final test_acc ");
  ASSERT_NE(at, std::string::npos) << output;
  const std::string trained = output.substr(at, output.find('\n', at) - at);
  ASSERT_EQ(
      RunCommand(Train() + kShort + " --max_steps=40 --checkpoint_every=40 --resume --checkpoint_dir=" + dir,
                 &output),
      0)
      << output;
  EXPECT_TRUE(Has(output,
                  "nothing left to train (step 40, --max_steps=40, --epochs=1): evaluating the resumed "
                  "weights"))
      << output;
  EXPECT_TRUE(Has(output, trained)) << "the same weights, the same evaluation: " << trained << "\n" << output;
}

// An empty test set says there is nothing to evaluate, instead of reporting accuracy 0.
TEST(OutputsTest, EmptyTestSetSaysThereIsNothingToEvaluate) {
  const std::string data = DataDirWithTestSet("data_empty_test", 0, 28, 28);
  const std::string metrics = TempPath("empty_test_metrics.jsonl");
  std::remove(metrics.c_str());
  std::string output;
  ASSERT_EQ(RunCommand(Train() + kShort + " --max_steps=5 --metrics_out=" + metrics + " --data_dir=" + data,
                       &output),
            0)
      << output;
  EXPECT_TRUE(Has(output, "no test samples, nothing evaluated")) << output;
  EXPECT_TRUE(Has(output, "final: nothing evaluated (the test set is empty)")) << output;
  EXPECT_FALSE(Has(output, "test_acc")) << output;
  std::string line;
  ASSERT_EQ(RunCommand("cat " + metrics, &line), 0);
  EXPECT_TRUE(Has(line, "\"test_loss\": null, \"test_acc\": null")) << line;
  ASSERT_EQ(RunCommand(Train() + kShort + " --max_steps=5 --save=" + TempPath("empty_test.safetensors") +
                           " --data_dir=" + data,
                       &output),
            0);
  EXPECT_EQ(RunCommand(Train() + " --model=mlp --eval_only --init_from=" +
                           TempPath("empty_test.safetensors") + " --data_dir=" + data,
                       &output),
            1);
  EXPECT_TRUE(Has(output, "--eval_only: the test set in " + data + " is empty: nothing to evaluate"))
      << output;
}

// --save=/dev/null run as root must not replace /dev/null with a regular file (a rename over it would,
// for every program on the machine): it is refused by name before training. Run where /dev is a fresh
// tmpfs of a private mount namespace, so that the machine's own /dev/null is safe whatever happens.
TEST(OutputsTest, SaveToDevNullIsRefusedAndLeavesItAlone) {
  std::string output;
  if (RunShell("unshare -m true", &output) != 0)
    GTEST_SKIP() << "no private mount namespace here: " << output;
  const int code = RunCommand(
      absl::StrCat("unshare -m sh -c 'mount -t tmpfs tmpfs /dev && mknod -m 666 /dev/null c 1 3 && ", Train(),
                   kShort, " --max_steps=2 --save=/dev/null; echo \"exit $?\"; stat -c %F /dev/null'"),
      &output);
  ASSERT_EQ(code, 0) << output;
  EXPECT_TRUE(Has(output,
                  "train: FAILED_PRECONDITION: --save=/dev/null: cannot write /dev/null: it is a character "
                  "device, not a regular file"))
      << output;
  EXPECT_TRUE(Has(output, "exit 1\ncharacter special file\n")) << output;
  EXPECT_FALSE(Has(output, "epoch 1")) << output;
}

// A device node, a FIFO or a directory at an output path is refused by name before the first step and
// left as it was: a FIFO would block the run (or another program reading it would get the bytes), a
// device node would be replaced by a regular file.
TEST(OutputsTest, PathsThatAreNotRegularFilesAreRefusedByName) {
  const std::string dir = FreshDir("special_outputs");
  std::string output;
  ASSERT_EQ(RunCommand("mkfifo " + dir + "/fifo", &output), 0) << output;
  const bool root = RunCommand("mknod " + dir + "/null c 1 3", &output) == 0;  // a copy of /dev/null's node
  std::vector<std::pair<std::string, std::string>> cases = {
      {"--save=" + dir + "/fifo", "it is a FIFO, not a regular file"},
      {"--metrics_out=" + dir + "/fifo", "it is a FIFO, not a regular file"},
      {"--dump_grads=" + dir + "/fifo", "it is a FIFO, not a regular file"},
      {"--log_samples=" + dir + "/fifo", "it is a FIFO, not a regular file"},
  };
  if (root) {
    cases.push_back({"--save=" + dir + "/null", "it is a character device, not a regular file"});
    cases.push_back({"--metrics_out=" + dir + "/null", "it is a character device, not a regular file"});
  }
  for (const auto& [flag, error] : cases) {
    // `timeout`: opening a FIFO for writing with no reader would block for ever.
    EXPECT_EQ(RunCommand("timeout 60 " + Train() + kShort + " --max_steps=2 " + flag, &output), 1)
        << flag << output;
    EXPECT_TRUE(Has(output, error)) << flag << "\n" << output;
    EXPECT_TRUE(Has(output, flag)) << "names the flag: " << output;
    EXPECT_FALSE(Has(output, "epoch 1")) << output;
  }
  EXPECT_EQ(FileType(dir + "/fifo"), "fifo\n");
  if (root) {
    EXPECT_EQ(FileType(dir + "/null"), "character special file\n");
  }
  EXPECT_EQ(Listing(dir), root ? "fifo\nnull\n" : "fifo\n") << "nothing written beside them";
}

// A symbolic link is written through to its target, as torch.save and shell redirection do: the link
// stays, the file it points to gets the weights (and the metrics lines).
TEST(OutputsTest, OutputsAreWrittenThroughSymbolicLinks) {
  const std::string dir = FreshDir("linked_outputs");
  std::string output;
  ASSERT_EQ(RunCommand(
                absl::StrCat("mkdir ", dir, "/real && echo old > ", dir, "/real/w.safetensors && ln -s real/",
                             "w.safetensors ", dir, "/w && ln -s real/m.jsonl ", dir, "/m"),
                &output),
            0)
      << output;
  ASSERT_EQ(RunCommand(Train() + kShort + " --max_steps=2 --save=" + dir + "/w --metrics_out=" + dir + "/m",
                       &output),
            0)
      << output;
  EXPECT_EQ(FileType(dir + "/w"), "symbolic link\n");
  EXPECT_EQ(FileType(dir + "/m"), "symbolic link\n");
  EXPECT_EQ(Listing(dir + "/real"), "m.jsonl\nw.safetensors\n");
  ASSERT_EQ(
      RunCommand(Train() + " --model=mlp --eval_only --init_from=" + dir + "/real/w.safetensors", &output), 0)
      << "the target holds the saved weights: " << output;
  std::string metrics;
  ASSERT_EQ(RunCommand("cat " + dir + "/real/m.jsonl", &metrics), 0);
  EXPECT_TRUE(Has(metrics, "{\"epoch\": 1, \"steps\": 2, ")) << metrics;
}

// A run that can save a checkpoint only when a SIGTERM stops it (--checkpoint_dir without
// --checkpoint_every) obeys the same guard as --checkpoint_every: a directory holding another run's
// step-N is refused at start, instead of that step being replaced when the signal comes.
TEST(OutputsTest, TheSigtermCheckpointObeysTheOverwriteGuard) {
  const std::string dir = FreshDir("sigterm_guard");
  std::string output;
  ASSERT_EQ(
      RunCommand(Train() + kShort + " --max_steps=2 --checkpoint_every=1 --checkpoint_dir=" + dir, &output),
      0)
      << output;
  std::string before;
  ASSERT_EQ(RunCommand("cat " + dir + "/step-1/manifest.json " + dir + "/step-2/manifest.json", &before), 0);
  EXPECT_EQ(RunCommand(Train() + kShort + " --max_steps=200 --seed=7 --checkpoint_dir=" + dir, &output), 1)
      << output;
  EXPECT_TRUE(
      Has(output, "train: ALREADY_EXISTS: --checkpoint_dir=" + dir +
                      " already holds step-1, step-2, newer "
                      "than step 0 where this run starts, which its checkpoints (one is saved when a SIGTERM "
                      "stops it) would overwrite or fall behind"))
      << output;
  EXPECT_FALSE(Has(output, "epoch 1")) << output;
  std::string after;
  ASSERT_EQ(RunCommand("cat " + dir + "/step-1/manifest.json " + dir + "/step-2/manifest.json", &after), 0);
  EXPECT_EQ(after, before);
  // Continuing the same run is what the directory is for.
  ASSERT_EQ(RunCommand(Train() + kShort + " --max_steps=3 --resume --checkpoint_dir=" + dir, &output), 0)
      << output;
}

// A loss that is not finite stops the run at once, naming the step and the likely cause, on every rank
// (they agree to stop, nobody waits), with nothing evaluated or saved; not 20 NaN steps and a late
// evaluation error.
TEST(OutputsTest, ANonFiniteLossStopsAtOnceNamingTheStep) {
  const std::string dir = FreshDir("nan_loss");
  const std::string run = Train() + kShort + " --lr=1e30 --max_steps=100 --save=" + dir + "/w";
  std::string output;
  EXPECT_EQ(RunCommand(run, &output), 1) << output;
  EXPECT_TRUE(Has(output,
                  "train: FAILED_PRECONDITION: the training loss is nan at step 2, so training stopped: the "
                  "learning rate is likely too high (--lr=1e+30; the loss was "))
      << output;
  EXPECT_FALSE(Has(output, "epoch 1:")) << "nothing evaluated: " << output;
  for (const char* join : {"true", "false"}) {
    EXPECT_EQ(RunCommand("DDP_TIMEOUT_S=60 " + Ddprun2() + run + " --join=" + join, &output), 1) << output;
    for (const std::string rank : {"[rank 0] ", "[rank 1] "}) {
      EXPECT_TRUE(
          Has(output, rank + "train: FAILED_PRECONDITION: the training loss is nan at step 2 (rank 0), so "
                             "training stopped on every rank: the learning rate is likely too high"))
          << "--join=" << join << "\n"
          << output;
    }
    EXPECT_FALSE(Has(output, "epoch 1:")) << output;
  }
  EXPECT_EQ(Listing(dir), "") << "no weights saved";
}

// An empty training set is an error, not "train_loss 0" and untrained weights saved; so is one that
// gives fewer batches than one optimizer step takes.
TEST(OutputsTest, AnEmptyTrainingSetIsAnError) {
  const std::string data = FreshDir("data_empty_train");
  WriteIdxSplit(data, "train", 0, 28, 28);
  WriteIdxSplit(data, "t10k", 20, 28, 28);
  const std::string out = FreshDir("empty_train_out");
  std::string output;
  EXPECT_EQ(RunCommand(Train() + kShort + " --save=" + out + "/w --data_dir=" + data, &output), 1) << output;
  EXPECT_TRUE(Has(
      output, "train: FAILED_PRECONDITION: the training set in " + data + " is empty: nothing to train on"))
      << output;
  EXPECT_EQ(RunCommand(Ddprun2() + Train() + kShort + " --save=" + out + "/w --data_dir=" + data, &output), 1)
      << output;
  EXPECT_TRUE(
      BothRanksFailedWith(output, "train: FAILED_PRECONDITION: the training set in " + data + " is empty"))
      << output;
  WriteIdxSplit(data, "train", 3, 28, 28);
  EXPECT_EQ(
      RunCommand(Train() + kShort + " --accumulate_steps=2 --save=" + out + "/w --data_dir=" + data, &output),
      1)
      << output;
  EXPECT_TRUE(Has(output,
                  "(3 samples) gives each rank 1 batch(es) of --batch_size=256 per epoch, fewer than the 2 "
                  "one optimizer step takes (--accumulate_steps): nothing to train"))
      << output;
  EXPECT_FALSE(Has(output, "train_loss")) << output;
  EXPECT_EQ(Listing(out), "") << "no weights saved";
}

// --threads=100000 is refused instead of segfaulting inside libgomp, and ddprun's --nproc_per_node=100000
// instead of trying to fork 100000 workers.
TEST(OutputsTest, ThreadAndWorkerCountsAreBounded) {
  std::string output;
  EXPECT_EQ(RunCommand(Train() + " --threads=100000", &output), 2) << output;
  EXPECT_TRUE(Has(output, "--threads must be in [1, 1024], got 100000")) << output;
  EXPECT_EQ(RunCommand(Train() + " --threads=0", &output), 2) << output;
  EXPECT_TRUE(Has(output, "--threads must be in [1, 1024], got 0")) << output;
  EXPECT_EQ(RunCommand(Runfile("launch/ddprun") + " --nproc_per_node=100000 /bin/true", &output), 2)
      << output;
  EXPECT_TRUE(Has(output, "ddprun: --nproc_per_node must be in [1, 1024] (workers on this node), got 100000"))
      << output;
}

}  // namespace
}  // namespace ddp
