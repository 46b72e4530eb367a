#include "checkpoint/checkpoint.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "nn/adam.h"
#include "nn/layers.h"
#include "nn/models.h"
#include "nn/sgd.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "checkpoint/checkpoint_test_util.h"
#include "testing/child_process.h"

namespace ddp {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string Bytes(const Tensor& t) { return std::string(static_cast<const char*>(t.raw_data()), t.nbytes()); }

void ExpectSameTensors(const NamedTensors& a, const NamedTensors& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_EQ(a[i].second.shape(), b[i].second.shape()) << a[i].first;
    EXPECT_EQ(a[i].second.dtype(), b[i].second.dtype()) << a[i].first;
    EXPECT_EQ(Bytes(a[i].second), Bytes(b[i].second)) << a[i].first;
  }
}

TEST(CheckpointTest, RoundTripIsBitExactAndResumesExactly) {
  const std::string dir = FreshDir("round_trip");
  auto model = Model(1);
  SgdOptions options;
  options.lr = 0.05f;
  options.momentum = 0.9f;
  Sgd sgd(model->Parameters(), options);
  TrainStep(*model, sgd, 10);
  TrainStep(*model, sgd, 11);
  Generator rng(42);
  rng.Next();
  const SamplerState sampler{9, 3, 1280};
  Checkpoint checkpoint = CaptureCheckpoint(*model, &sgd, sampler, &rng, 2, 3);
  checkpoint.extra_state = {{"ddp_bucket_order", "5,4,3,0,1,2"}, {"owner.blob", std::string("a\0b\n\"", 5)}};
  ASSERT_TRUE(SaveCheckpoint(dir, checkpoint).ok());

  absl::StatusOr<Checkpoint> loaded = LoadLatestCheckpoint(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->step, 2);
  EXPECT_EQ(loaded->epoch, 3);
  EXPECT_EQ(loaded->sampler, sampler);
  EXPECT_EQ(loaded->source, dir + "/step-2");
  EXPECT_EQ(loaded->extra_state, checkpoint.extra_state);
  ExpectSameTensors(loaded->model, model->StateDict());
  ExpectSameTensors(loaded->optimizer.tensors, sgd.StateDict().tensors);
  EXPECT_EQ(loaded->optimizer.step_count, 2);

  // Restore into fresh objects, then both continue identically.
  auto resumed = Model(99);
  Sgd resumed_sgd(resumed->Parameters(), options);
  Generator resumed_rng(0);
  ASSERT_TRUE(ApplyCheckpoint(*loaded, {resumed.get(), &resumed_sgd, &resumed_rng}).ok());
  ExpectSameTensors(resumed->StateDict(), model->StateDict());
  EXPECT_FALSE(resumed_sgd.StateDict().tensors.empty());
  ExpectSameTensors(resumed_sgd.StateDict().tensors, sgd.StateDict().tensors);
  EXPECT_EQ(resumed_sgd.step_count(), 2);
  EXPECT_EQ(resumed_rng.Next(), rng.Next());
  TrainStep(*model, sgd, 12);
  TrainStep(*resumed, resumed_sgd, 12);
  ExpectSameTensors(resumed->StateDict(), model->StateDict());
}

TEST(CheckpointTest, AdamStateRoundTrips) {
  const std::string dir = FreshDir("adam");
  auto model = Model(1);
  Adam adam(model->Parameters(), AdamOptions{});
  TrainStep(*model, adam, 1);
  ASSERT_TRUE(SaveCheckpoint(dir, CaptureCheckpoint(*model, &adam, {}, nullptr, 1, 0)).ok());
  absl::StatusOr<Checkpoint> loaded = LoadLatestCheckpoint(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto resumed = Model(2);
  Adam resumed_adam(resumed->Parameters(), AdamOptions{});
  ASSERT_TRUE(ApplyCheckpoint(*loaded, {resumed.get(), &resumed_adam, nullptr}).ok());
  ExpectSameTensors(resumed_adam.StateDict().tensors, adam.StateDict().tensors);
}

TEST(CheckpointTest, NoCheckpointIsNotFound) {
  const std::string dir = FreshDir("none");
  EXPECT_TRUE(absl::IsNotFound(LoadLatestCheckpoint(dir).status()));
}

TEST(CheckpointTest, CorruptByteInEachFileNamesFileAndTensor) {
  for (const std::string file : {"model.safetensors", "optimizer.safetensors", "manifest.json"}) {
    Saved saved = SaveTrained("corrupt");
    const std::string path = saved.path + "/" + file;
    std::string bytes = ReadAll(path);
    bytes[bytes.size() - 2] ^= 0x5a;  // in the last tensor's data for the safetensors files
    WriteAll(path, bytes);
    const absl::Status status = LoadLatestCheckpoint(saved.dir).status();
    EXPECT_TRUE(absl::IsDataLoss(status)) << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr(path));
    if (file == "model.safetensors") {
      EXPECT_THAT(std::string(status.message()),
                  HasSubstr("\"" + saved.checkpoint.model.back().first + "\""));
    } else if (file == "optimizer.safetensors") {
      EXPECT_THAT(std::string(status.message()),
                  HasSubstr("\"" + saved.checkpoint.optimizer.tensors.back().first + "\""));
    }
  }
}

TEST(CheckpointTest, CorruptHeaderNamesFile) {
  Saved saved = SaveTrained("corrupt_header");
  const std::string path = saved.path + "/model.safetensors";
  std::string bytes = ReadAll(path);
  bytes[12] = '}';
  WriteAll(path, bytes);
  const absl::Status status = LoadLatestCheckpoint(saved.dir).status();
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(path));
}

// A change that keeps the manifest valid JSON is caught by its own checksum.
TEST(CheckpointTest, EditedManifestIsDetected) {
  Saved saved = SaveTrained("edited_manifest");
  const std::string path = saved.path + "/manifest.json";
  std::string text = ReadAll(path);
  const size_t at = text.find("\"epoch\": 1");
  ASSERT_NE(at, std::string::npos) << text.substr(0, 200);
  text[at + 9] = '2';
  WriteAll(path, text);
  const absl::Status status = LoadLatestCheckpoint(saved.dir).status();
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(path));
  EXPECT_THAT(std::string(status.message()), HasSubstr("checksum"));
}

TEST(CheckpointTest, TruncatedFilesNameFileAndTensor) {
  for (const std::string file : {"model.safetensors", "optimizer.safetensors", "manifest.json"}) {
    Saved saved = SaveTrained("truncated");
    const std::string path = saved.path + "/" + file;
    const std::string bytes = ReadAll(path);
    WriteAll(path, bytes.substr(0, bytes.size() - 5));
    const absl::Status status = LoadLatestCheckpoint(saved.dir).status();
    EXPECT_TRUE(absl::IsDataLoss(status)) << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr(path));
    if (file == "model.safetensors") {
      EXPECT_THAT(std::string(status.message()), HasSubstr(saved.checkpoint.model.back().first));
    }
    WriteAll(path, bytes.substr(0, 4));
    const absl::Status tiny = LoadLatestCheckpoint(saved.dir).status();
    EXPECT_TRUE(absl::IsDataLoss(tiny)) << tiny;
    EXPECT_THAT(std::string(tiny.message()), HasSubstr(path));
    WriteAll(path, "");
    EXPECT_TRUE(absl::IsDataLoss(LoadLatestCheckpoint(saved.dir).status()));
  }
}

TEST(CheckpointTest, MissingFilesNameTheFile) {
  for (const std::string file : {"model.safetensors", "manifest.json"}) {
    Saved saved = SaveTrained("missing");
    fs::remove(saved.path + "/" + file);
    const absl::Status status = LoadLatestCheckpoint(saved.dir).status();
    EXPECT_TRUE(absl::IsDataLoss(status)) << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr(saved.path + "/" + file));
  }
  Saved saved = SaveTrained("bad_latest");
  WriteAll(saved.dir + "/latest", "garbage\n");
  const absl::Status status = LoadLatestCheckpoint(saved.dir).status();
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(saved.dir + "/latest"));
}

// Two small nets whose state differs in shape or name.
std::shared_ptr<Module> Mlp(int64_t hidden, Generator& g) {
  auto net = std::make_shared<nn::Sequential>();
  net->Add(std::make_shared<nn::Linear>(4, hidden, g));
  net->Add(std::make_shared<nn::ReLU>());
  net->Add(std::make_shared<nn::Linear>(hidden, 2, g));
  return net;
}

TEST(CheckpointTest, MismatchedShapeNameOrDtypeNamesFileAndTensorAndChangesNothing) {
  const std::string dir = FreshDir("mismatch");
  Generator g(1);
  auto saved_net = Mlp(8, g);
  ASSERT_TRUE(SaveCheckpoint(dir, CaptureCheckpoint(*saved_net, nullptr, {}, nullptr, 1, 0)).ok());
  absl::StatusOr<Checkpoint> loaded = LoadLatestCheckpoint(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const std::string model_file = dir + "/step-1/model.safetensors";

  auto wider = Mlp(9, g);
  const std::string before = Bytes(wider->StateDict()[0].second);
  absl::Status status = ApplyCheckpoint(*loaded, {wider.get(), nullptr, nullptr});
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr(model_file));
  EXPECT_THAT(std::string(status.message()), HasSubstr("0.weight"));
  EXPECT_EQ(Bytes(wider->StateDict()[0].second), before);

  auto one_layer = std::make_shared<nn::Linear>(4, 8, g);
  status = ApplyCheckpoint(*loaded, {one_layer.get(), nullptr, nullptr});
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr(model_file));
  EXPECT_THAT(std::string(status.message()), HasSubstr("weight"));

  // A checkpoint whose tensor has the wrong dtype.
  Checkpoint bad = *loaded;
  bad.model[1].second = Zeros(bad.model[1].second.shape(), DType::kInt64);
  bad.step = 2;
  ASSERT_TRUE(SaveCheckpoint(dir, bad).ok());
  loaded = LoadLatestCheckpoint(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto same = Mlp(8, g);
  status = ApplyCheckpoint(*loaded, {same.get(), nullptr, nullptr});
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr(dir + "/step-2/model.safetensors"));
  EXPECT_THAT(std::string(status.message()), HasSubstr(bad.model[1].first));
}

TEST(CheckpointTest, MismatchedOptimizerStateNamesFileAndTensor) {
  const std::string dir = FreshDir("optimizer_mismatch");
  Generator g(1);
  auto net = Mlp(8, g);
  SgdOptions options;
  options.momentum = 0.9f;
  Sgd sgd(net->Parameters(), options);
  for (const Tensor& p : net->Parameters()) p.set_grad(Ones(p.shape()));
  sgd.Step();
  ASSERT_TRUE(SaveCheckpoint(dir, CaptureCheckpoint(*net, &sgd, {}, nullptr, 1, 0)).ok());
  absl::StatusOr<Checkpoint> loaded = LoadLatestCheckpoint(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status();

  auto wider = Mlp(9, g);
  Sgd wider_sgd(wider->Parameters(), options);
  const absl::Status status = ApplyCheckpoint(*loaded, {wider.get(), &wider_sgd, nullptr});
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr(dir + "/step-1/optimizer.safetensors"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("0.momentum_buffer"));
  EXPECT_TRUE(wider_sgd.StateDict().tensors.empty());
}

// Saving fails (a regular file where the step directory must go: works even as root, which ignores
// permissions): the error names the path, the previous checkpoint and `latest` are intact, nothing is
// left over.
TEST(CheckpointTest, FailedSaveKeepsPreviousCheckpoint) {
  Saved saved = SaveTrained("failed_save");
  Checkpoint next = saved.checkpoint;
  next.step = 8;
  WriteAll(saved.dir + "/step-8", "not a directory");
  absl::Status status = SaveCheckpoint(saved.dir, next);
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr(saved.dir + "/step-8"));
  EXPECT_EQ(ReadAll(saved.dir + "/latest"), "step-7\n");
  EXPECT_FALSE(fs::exists(saved.dir + "/.tmp-step-8"));
  absl::StatusOr<Checkpoint> loaded = LoadLatestCheckpoint(saved.dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->step, 7);
  ExpectSameTensors(loaded->model, saved.checkpoint.model);

  // The checkpoint directory itself is a file.
  status = SaveCheckpoint(saved.dir + "/latest/sub", next);
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr(saved.dir + "/latest/sub"));
}

// Runs `set_up` (process-wide, so in a child: testing/child_process.h), then saves step 8 there.
ChildRun SaveStep8InChild(const Saved& saved, const std::function<std::string()>& set_up) {
  Checkpoint next = saved.checkpoint;
  next.step = 8;
  return RunInChild(set_up, [&] { return SaveCheckpoint(saved.dir, next); });
}

// After a failed save of step 8: `latest` still names step 7, which loads, and nothing of step 8 is left.
void ExpectPreviousCheckpointIntact(const Saved& saved) {
  EXPECT_EQ(ReadAll(saved.dir + "/latest"), "step-7\n");
  EXPECT_FALSE(fs::exists(saved.dir + "/step-8"));
  EXPECT_FALSE(fs::exists(saved.dir + "/.tmp-step-8"));
  absl::StatusOr<Checkpoint> loaded = LoadLatestCheckpoint(saved.dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->step, 7);
  ExpectSameTensors(loaded->model, saved.checkpoint.model);
}

// The child's save failed with an error naming the checkpoint directory and `reason`, and the previous
// checkpoint is intact. The error is recorded in the test XML (save_error).
void ExpectFailedSave(const ChildRun& child, const Saved& saved, const std::string& reason) {
  ASSERT_FALSE(child.status.ok()) << "the save did not fail";
  const std::string message(child.status.message());
  EXPECT_THAT(message, HasSubstr(saved.dir)) << message;
  EXPECT_THAT(message, HasSubstr(reason)) << message;
  ::testing::Test::RecordProperty("save_error", message);
  ExpectPreviousCheckpointIntact(saved);
}

// Disk full, simulated with a file size limit in a child process (writes past 256 KiB fail with EFBIG,
// as they would with ENOSPC; works as root): the error names the file being written, and the previous
// checkpoint is intact.
TEST(CheckpointTest, DiskFullKeepsPreviousCheckpoint) {
  Saved saved = SaveTrained("disk_full");
  const ChildRun child = SaveStep8InChild(saved, [] { return LimitFileSize(256 << 10); });
  ASSERT_FALSE(child.skipped) << child.status;
  ExpectFailedSave(child, saved, "File too large");
}

// A read-only checkpoint directory (chmod when not root; as root, which ignores permissions, a read-only
// bind mount in the child's private mount namespace).
TEST(CheckpointTest, ReadOnlyDirectoryKeepsPreviousCheckpoint) {
  Saved saved = SaveTrained("read_only");
  const ChildRun child = SaveStep8InChild(saved, [&] { return MakeDirectoryReadOnly(saved.dir); });
  ::chmod(saved.dir.c_str(), 0755);
  if (child.skipped) GTEST_SKIP() << "cannot make a read-only directory: " << child.status.message();
  EXPECT_TRUE(absl::IsPermissionDenied(child.status)) << child.status;
  ExpectFailedSave(child, saved, ::geteuid() == 0 ? "Read-only file system" : "Permission denied");
}

TEST(CheckpointTest, ResavingAStepReplacesItAndKeepLastPrunes) {
  Saved saved = SaveTrained("resave");
  Checkpoint next = saved.checkpoint;
  next.epoch = 5;
  ASSERT_TRUE(SaveCheckpoint(saved.dir, next).ok());
  absl::StatusOr<Checkpoint> loaded = LoadLatestCheckpoint(saved.dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->epoch, 5);
  for (int64_t step : {8, 9, 10}) {
    next.step = step;
    ASSERT_TRUE(SaveCheckpoint(saved.dir, next, SaveCheckpointOptions{2}).ok());
  }
  EXPECT_FALSE(fs::exists(saved.dir + "/step-7"));
  EXPECT_FALSE(fs::exists(saved.dir + "/step-8"));
  EXPECT_TRUE(fs::exists(saved.dir + "/step-9"));
  EXPECT_EQ(ReadAll(saved.dir + "/latest"), "step-10\n");
}

// Without replace_existing an existing step (another run's) is refused by name and left byte for byte,
// dir/latest included; a step that does not exist yet is written as usual.
TEST(CheckpointTest, WithoutReplaceExistingAnExistingStepIsKept) {
  Saved saved = SaveTrained("no_replace");
  const std::string manifest = ReadAll(saved.dir + "/step-7/manifest.json");
  const std::string latest = ReadAll(saved.dir + "/latest");
  Checkpoint other = saved.checkpoint;
  other.epoch = 99;
  SaveCheckpointOptions options;
  options.replace_existing = false;
  const absl::Status status = SaveCheckpoint(saved.dir, other, options);
  EXPECT_TRUE(absl::IsAlreadyExists(status)) << status;
  EXPECT_EQ(status.message(), "checkpoint: " + saved.dir +
                                  "/step-7 already exists and is not replaced (another "
                                  "run's checkpoint?)");
  EXPECT_EQ(ReadAll(saved.dir + "/step-7/manifest.json"), manifest);
  EXPECT_EQ(ReadAll(saved.dir + "/latest"), latest);
  EXPECT_FALSE(fs::exists(saved.dir + "/.tmp-step-7"));
  other.step = 8;
  ASSERT_TRUE(SaveCheckpoint(saved.dir, other, options).ok());
  EXPECT_EQ(ReadAll(saved.dir + "/latest"), "step-8\n");
}

// Saves steps 7 and 10 (SaveTrained's checkpoint under two step numbers) into a fresh directory.
Saved SaveSteps7And10(const std::string& name) {
  Saved saved = SaveTrained(name);
  Checkpoint newer = saved.checkpoint;
  newer.step = 10;
  EXPECT_TRUE(SaveCheckpoint(saved.dir, newer).ok());
  return saved;
}

// FindNewestCheckpoint(dir) takes `step`, with no note (`note` empty) or one that contains `note`.
void ExpectFinds(const std::string& dir, int64_t step, const std::string& note) {
  absl::StatusOr<FoundCheckpoint> found = FindNewestCheckpoint(dir);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->checkpoint.step, step);
  EXPECT_EQ(found->checkpoint.source, dir + "/step-" + std::to_string(step));
  if (note.empty()) {
    EXPECT_EQ(found->scan_note, "");
  } else {
    EXPECT_THAT(found->scan_note, HasSubstr(note));
  }
}

TEST(FindNewestCheckpointTest, TakesLatestsStepWithoutANote) {
  Saved saved = SaveSteps7And10("find_latest");
  ExpectFinds(saved.dir, 10, "");
}

// With dir/latest gone, complete steps are found by a scan, not ignored ("starting fresh").
TEST(FindNewestCheckpointTest, ScansWhenLatestIsMissing) {
  Saved saved = SaveSteps7And10("find_no_latest");
  ASSERT_EQ(::unlink((saved.dir + "/latest").c_str()), 0);
  ExpectFinds(saved.dir, 10, saved.dir + "/latest does not exist; took step-10, the newest complete step");
}

TEST(FindNewestCheckpointTest, ScansWhenLatestNamesAMissingOrOlderStep) {
  Saved saved = SaveSteps7And10("find_bad_latest");
  WriteAll(saved.dir + "/latest", "step-99\n");
  ExpectFinds(saved.dir, 10, "/latest names step-99, which does not exist; took step-10");
  // A crash between publishing step-10 and replacing dir/latest leaves dir/latest behind.
  WriteAll(saved.dir + "/latest", "step-7\n");
  ExpectFinds(saved.dir, 10, "/latest names step-7; took step-10");
}

TEST(FindNewestCheckpointTest, SkipsADamagedNewerStepAndSaysWhy) {
  Saved saved = SaveSteps7And10("find_damaged");
  WriteAll(saved.dir + "/step-10/manifest.json", "{");
  ExpectFinds(saved.dir, 7,
              "took step-7, the newest complete step; skipped step-10: checkpoint file " + saved.dir +
                  "/step-10/manifest.json");
  WriteAll(saved.dir + "/step-7/manifest.json", "");
  const absl::Status none = FindNewestCheckpoint(saved.dir).status();
  EXPECT_TRUE(absl::IsDataLoss(none)) << none;
  EXPECT_THAT(std::string(none.message()), HasSubstr("skipped step-10"));
  EXPECT_THAT(std::string(none.message()), HasSubstr("skipped step-7"));
}

TEST(FindNewestCheckpointTest, NoStepDirectoryIsNotFound) {
  const std::string dir = FreshDir("find_none");
  EXPECT_TRUE(absl::IsNotFound(FindNewestCheckpoint(dir).status()));
  fs::create_directories(dir + "/.tmp-step-3");
  WriteAll(dir + "/latest", "step-3\n");
  WriteAll(dir + "/step-4", "a file, not a step directory");
  EXPECT_TRUE(absl::IsNotFound(FindNewestCheckpoint(dir).status()));
  absl::StatusOr<std::vector<int64_t>> steps = ListCheckpointSteps(dir);
  ASSERT_TRUE(steps.ok()) << steps.status();
  EXPECT_TRUE(steps->empty());
  EXPECT_FALSE(ListCheckpointSteps(dir + "/step-4").ok()) << "a file is not a checkpoint directory";
}

TEST(RemoveCheckpointsAfterTest, RemovesNewerStepsAndTheirLatest) {
  Saved saved = SaveSteps7And10("remove_after");
  fs::create_directories(saved.dir + "/step-12");  // incomplete: removed all the same
  absl::StatusOr<std::vector<int64_t>> steps = ListCheckpointSteps(saved.dir);
  ASSERT_TRUE(steps.ok()) << steps.status();
  EXPECT_EQ(*steps, (std::vector<int64_t>{12, 10, 7}));
  absl::StatusOr<std::vector<std::string>> removed = RemoveCheckpointsAfter(saved.dir, 7);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(*removed, (std::vector<std::string>{"step-10", "step-12"}));
  EXPECT_TRUE(fs::exists(saved.dir + "/step-7"));
  EXPECT_FALSE(fs::exists(saved.dir + "/latest")) << "it named step-10";
  removed = RemoveCheckpointsAfter(saved.dir, 0);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(*removed, (std::vector<std::string>{"step-7"}));
  EXPECT_TRUE(absl::IsNotFound(FindNewestCheckpoint(saved.dir).status()));
}

}  // namespace
}  // namespace ddp
