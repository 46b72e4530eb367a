// The data record of checkpoints (Note [Data record]): round trip, malformed records named by file and
// field, another data set refused by name, other crops and flips noted.
#include "train/data_record.h"

#include <gtest/gtest.h>

#include <string>

namespace ddp {
namespace {

TrainConfig Cifar(int64_t padding, bool flip) {
  TrainConfig config;
  config.dataset = "cifar10";
  config.data_dir = "/d";
  config.random_crop_padding = padding;
  config.random_flip = flip;
  return config;
}

TEST(DataRecordTest, RoundTrips) {
  const std::string text = EncodeDataRecord(CurrentDataRecord(Cifar(4, true)));
  EXPECT_EQ(text, R"({"dataset":"cifar10","random_crop_padding":4,"random_flip":true})");
  absl::StatusOr<DataRecord> back = DecodeDataRecord(text, "/ck/step-5/manifest.json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->dataset, "cifar10");
  EXPECT_EQ(back->random_crop_padding, 4);
  EXPECT_TRUE(back->random_flip);
}

TEST(DataRecordTest, MalformedRecordsNameTheFileAndTheField) {
  const std::string where = "/ck/step-5/manifest.json";
  EXPECT_EQ(DecodeDataRecord("[1]", where).status().message(),
            "checkpoint file /ck/step-5/manifest.json: \"data\" must be an object, got [1]");
  EXPECT_EQ(DecodeDataRecord(R"({"random_crop_padding":0,"random_flip":false})", where).status().message(),
            "checkpoint file /ck/step-5/manifest.json: \"data.dataset\" is missing");
  EXPECT_EQ(DecodeDataRecord(R"({"dataset":"mnist","random_crop_padding":-1,"random_flip":false})", where)
                .status()
                .message(),
            "checkpoint file /ck/step-5/manifest.json: \"data.random_crop_padding\" must be an integer >= 0");
  EXPECT_EQ(DecodeDataRecord(R"({"dataset":"mnist","random_crop_padding":0,"random_flip":"yes"})", where)
                .status()
                .code(),
            absl::StatusCode::kDataLoss);
}

TEST(DataRecordTest, ResumingOnAnotherDataSetIsRefusedAndOtherCropsAreNoted) {
  std::string note = "stale";
  const std::string fashion = EncodeDataRecord(DataRecord{"fashion_mnist", 0, false});
  TrainConfig mnist;
  mnist.dataset = "mnist";
  const absl::Status other = CheckResumeData(fashion, "/ck/step-200", mnist, &note);
  EXPECT_TRUE(absl::IsFailedPrecondition(other)) << other;
  EXPECT_EQ(
      other.message(),
      "--resume: the checkpoint in /ck/step-200 trained on --dataset=fashion_mnist, not mnist: resume with "
      "--dataset=fashion_mnist, or start from its weights with --init_from=/ck/step-200/model.safetensors "
      "and a new --checkpoint_dir");
  EXPECT_TRUE(note.empty());
  const std::string cifar = EncodeDataRecord(CurrentDataRecord(Cifar(4, true)));
  ASSERT_TRUE(CheckResumeData(cifar, "/ck/step-9", Cifar(4, true), &note).ok());
  EXPECT_EQ(note, "");
  ASSERT_TRUE(CheckResumeData(cifar, "/ck/step-9", Cifar(0, true), &note).ok());
  EXPECT_EQ(note,
            "--resume: the checkpoint's steps drew --random_crop_padding=4 --random_flip, this run draws "
            "--random_flip: the run continues, not bit for bit");
  ASSERT_TRUE(CheckResumeData(cifar, "/ck/step-9", Cifar(0, false), &note).ok());
  EXPECT_NE(note.find("this run draws no crops or flips"), std::string::npos) << note;
  // A checkpoint without the record resumes as before.
  EXPECT_TRUE(CheckResumeData("", "/ck/step-9", mnist, &note).ok());
  EXPECT_TRUE(note.empty());
}

}  // namespace
}  // namespace ddp
