// Note [Replacement fit check]: the job's profile survives the store as bytes, malformed bytes are refused
// by name, and a replacement whose settings or data differ is told the first difference before it
// registers; a job that published none is reported as such, after the wait.
#include "train/job_profile.h"

#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "store/memory_store.h"
#include "store/store_keys.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;

// The profile of the default configuration with `lr` and data described as loaded from `folder` with
// fingerprint `key`.
JobProfile Profile(double lr, const std::string& folder, const std::string& key) {
  TrainConfig config;
  config.lr = lr;
  return ProfileOf(config,
                   LoadedData{key, folder + " (60000 training, 10000 test images; data " + key + ")"});
}

TEST(JobProfileTest, EncodedProfileDecodesToTheSameFields) {
  const JobProfile profile = Profile(0.01, "/data", "00000000000000aa");
  ASSERT_GT(profile.settings.size(), 10u);
  const absl::StatusOr<JobProfile> decoded = DecodeJobProfile(EncodeJobProfile(profile));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_EQ(decoded->settings.size(), profile.settings.size());
  for (size_t i = 0; i < profile.settings.size(); ++i) {
    EXPECT_EQ(decoded->settings[i].name, profile.settings[i].name);
    EXPECT_EQ(decoded->settings[i].value, profile.settings[i].value);
  }
  EXPECT_EQ(decoded->data.key, profile.data.key);
  EXPECT_EQ(decoded->data.detail, profile.data.detail);
  EXPECT_TRUE(CompareWithJob(profile, *decoded).ok());
}

// Every proper prefix, a trailing byte and another format number are refused, naming the store key.
TEST(JobProfileTest, MalformedBytesAreRefusedByName) {
  const std::string bytes = EncodeJobProfile(Profile(0.01, "/data", "00000000000000aa"));
  for (size_t length = 0; length < bytes.size(); ++length) {
    const absl::StatusOr<JobProfile> cut = DecodeJobProfile(bytes.substr(0, length));
    ASSERT_FALSE(cut.ok()) << length;
    EXPECT_EQ(cut.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(cut.status().message(), HasSubstr("store key elastic/profile"));
  }
  EXPECT_THAT(DecodeJobProfile(bytes + "x").status().message(), HasSubstr("1 bytes after the end"));
  std::string other_format = bytes;
  other_format[0] = 2;
  EXPECT_THAT(DecodeJobProfile(other_format).status().message(), HasSubstr("format 2, expected 1"));
}

TEST(JobProfileTest, TheFirstDifferenceIsNamed) {
  const JobProfile job = Profile(0.01, "/data", "00000000000000aa");
  const absl::Status lr = CompareWithJob(job, Profile(0.02, "/data", "00000000000000aa"));
  EXPECT_EQ(lr.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(lr.message(), "this replacement cannot join the job: its --lr is 0.02, the job's 0.01");
  // The settings are compared first: both differ here, the settings are named.
  EXPECT_THAT(CompareWithJob(job, Profile(0.02, "/other", "00000000000000bb")).message(), HasSubstr("--lr"));
  const absl::Status data = CompareWithJob(job, Profile(0.01, "/mnt/data", "00000000000000bb"));
  EXPECT_EQ(data.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(data.message(),
            "this replacement cannot join the job: it loaded different data: the job (rank 0): /data (60000 "
            "training, 10000 test images; data 00000000000000aa); this replacement: /mnt/data (60000 "
            "training, 10000 test images; data 00000000000000bb)");
  // Another folder holding the same bytes is the same data.
  EXPECT_TRUE(CompareWithJob(job, Profile(0.01, "/mnt/data", "00000000000000aa")).ok());
  JobProfile fewer = job;
  fewer.settings.pop_back();
  EXPECT_THAT(CompareWithJob(job, fewer).message(),
              HasSubstr(absl::StrCat("it shares ", fewer.settings.size(), " settings, the job ",
                                     job.settings.size())));
}

TEST(JobProfileTest, AReplacementComparesWithWhatRankZeroPublished) {
  MemoryStore store;
  ASSERT_TRUE(PublishJobProfile(store, Profile(0.01, "/data", "00000000000000aa")).ok());
  const absl::StatusOr<bool> same =
      CheckReplacementFitsJob(store, Profile(0.01, "/copy", "00000000000000aa"), absl::Seconds(5));
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_TRUE(*same);
  const absl::StatusOr<bool> other =
      CheckReplacementFitsJob(store, Profile(0.01, "/copy", "00000000000000bb"), absl::Seconds(5));
  EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(store.Set(ElasticJobProfileKey(), "garbage").ok());
  EXPECT_EQ(CheckReplacementFitsJob(store, Profile(0.01, "/copy", "00000000000000aa"), absl::Seconds(5))
                .status()
                .code(),
            absl::StatusCode::kDataLoss);
}

// No profile: false after the wait, not an error; the note says what is and is not compared then.
TEST(JobProfileTest, AJobThatPublishedNoneIsNotComparedAfterTheWait) {
  MemoryStore store;
  const absl::Time start = absl::Now();
  const absl::StatusOr<bool> compared =
      CheckReplacementFitsJob(store, Profile(0.01, "/data", "00000000000000aa"), absl::Milliseconds(200));
  ASSERT_TRUE(compared.ok()) << compared.status();
  EXPECT_FALSE(*compared);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(200));
  EXPECT_THAT(NoJobProfileNote(),
              HasSubstr("the job published no profile (store key elastic/profile) within 10s"));
}

}  // namespace
}  // namespace ddp
