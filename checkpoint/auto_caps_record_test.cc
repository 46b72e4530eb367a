// --bucket_cap_mb=auto's record in checkpoints (AutoBucketCapsRecord): round trip, malformed records named
// by file and field, invalid records refused at save.
#include <cmath>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "base/fnv1a.h"
#include "nn/sgd.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// --bucket_cap_mb=auto's record: every field survives, "no cap" included; step times are optional; a
// checkpoint written without one loads without one (as older checkpoints do).
TEST(AutoBucketCapsRecordTest, RoundTrips) {
  const std::string dir = FreshDir("auto_caps");
  auto model = Model(1, "mlp");
  Sgd sgd(model->Parameters(), SgdOptions{});
  Checkpoint checkpoint = CaptureCheckpoint(*model, &sgd, SamplerState{1, 0, 64}, nullptr, 3, 1);
  const double inf = std::numeric_limits<double>::infinity();
  checkpoint.auto_bucket_caps = AutoBucketCapsRecord{0.0625, inf, 3, "shm", 0.01234567891, 0.0131};
  ASSERT_TRUE(SaveCheckpoint(dir, checkpoint).ok());
  checkpoint.step = 4;
  checkpoint.auto_bucket_caps = AutoBucketCapsRecord{5, 25, 2, "gloo", -1, -1};
  ASSERT_TRUE(SaveCheckpoint(dir, checkpoint).ok());
  checkpoint.step = 5;
  checkpoint.auto_bucket_caps.reset();
  ASSERT_TRUE(SaveCheckpoint(dir, checkpoint).ok());

  absl::StatusOr<Checkpoint> first = LoadCheckpoint(dir + "/step-3");
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(first->auto_bucket_caps.has_value());
  EXPECT_EQ(first->auto_bucket_caps->first_bucket_cap_mib, 0.0625);
  EXPECT_EQ(first->auto_bucket_caps->bucket_cap_mib, inf);
  EXPECT_EQ(first->auto_bucket_caps->world_size, 3);
  EXPECT_EQ(first->auto_bucket_caps->backend, "shm");
  EXPECT_EQ(first->auto_bucket_caps->predicted_step_s, 0.01234567891);
  EXPECT_EQ(first->auto_bucket_caps->measured_step_s, 0.0131);
  EXPECT_THAT(ReadAll(dir + "/step-3/manifest.json"), HasSubstr("\"bucket_cap_mib\": \"inf\""));

  absl::StatusOr<Checkpoint> second = LoadCheckpoint(dir + "/step-4");
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_TRUE(second->auto_bucket_caps.has_value());
  EXPECT_EQ(second->auto_bucket_caps->first_bucket_cap_mib, 5);
  EXPECT_EQ(second->auto_bucket_caps->bucket_cap_mib, 25);
  EXPECT_EQ(second->auto_bucket_caps->world_size, 2);
  EXPECT_EQ(second->auto_bucket_caps->backend, "gloo");
  EXPECT_LT(second->auto_bucket_caps->predicted_step_s, 0);
  EXPECT_LT(second->auto_bucket_caps->measured_step_s, 0);
  EXPECT_THAT(ReadAll(dir + "/step-4/manifest.json"), Not(HasSubstr("predicted_step_s")));

  absl::StatusOr<Checkpoint> none = LoadCheckpoint(dir + "/step-5");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->auto_bucket_caps.has_value());
  EXPECT_THAT(ReadAll(dir + "/step-5/manifest.json"), Not(HasSubstr("auto_bucket_caps")));
}

// Replaces the manifest body's "auto_bucket_caps" with `record` (absent when discarded) and re-seals the
// manifest's own checksum, as a buggy or hand-edited writer would: only the record's validation is left
// to catch it.
void RewriteAutoCapsRecord(const std::string& manifest_path, const nlohmann::ordered_json& record) {
  nlohmann::ordered_json manifest = nlohmann::ordered_json::parse(ReadAll(manifest_path));
  manifest["body"]["auto_bucket_caps"] = record;
  const std::string body = manifest["body"].dump();
  manifest["fnv1a64"] = absl::StrFormat("%016x", Fnv1a64(body.data(), body.size()));
  WriteAll(manifest_path, manifest.dump(1));
}

TEST(AutoBucketCapsRecordTest, MalformedNamesFileAndField) {
  using Json = nlohmann::ordered_json;
  const Json good = {{"first_bucket_cap_mib", 0.25}, {"bucket_cap_mib", 25}, {"world_size", 2}, {"backend", "gloo"},
                     {"predicted_step_s", 0.01}};
  struct Case {
    std::function<void(Json&)> edit;
    std::string message;  // expected in the error, after the manifest's path
  };
  const std::vector<Case> cases = {
      {[](Json& j) { j = "25"; }, "\"auto_bucket_caps\" must be an object, got \"25\""},
      {[](Json& j) { j["bucket_cap_mib"] = -1; },
       "\"auto_bucket_caps.bucket_cap_mib\" must be >= 0 (MiB) or \"inf\", got -1"},
      {[](Json& j) { j["first_bucket_cap_mib"] = "big"; },
       "\"auto_bucket_caps.first_bucket_cap_mib\" must be a number (MiB) or \"inf\", got \"big\""},
      {[](Json& j) { j.erase("bucket_cap_mib"); }, "\"auto_bucket_caps.bucket_cap_mib\" is missing"},
      {[](Json& j) { j["world_size"] = 0; }, "\"auto_bucket_caps.world_size\" must be an integer >= 1, got 0"},
      {[](Json& j) { j["world_size"] = 2.5; }, "\"auto_bucket_caps.world_size\" must be an integer >= 1, got 2.5"},
      {[](Json& j) { j.erase("backend"); }, "\"auto_bucket_caps.backend\" must be a string, got nothing"},
      {[](Json& j) { j["backend"] = ""; }, "\"auto_bucket_caps.backend\" must name a backend"},
      {[](Json& j) { j["measured_step_s"] = "fast"; },
       "\"auto_bucket_caps.measured_step_s\" must be a number >= 0 (seconds), got \"fast\""},
  };
  for (const Case& c : cases) {
    Saved saved = SaveTrained("malformed_auto_caps");
    const std::string manifest = saved.path + "/manifest.json";
    Json record = good;
    RewriteAutoCapsRecord(manifest, record);
    ASSERT_TRUE(LoadCheckpoint(saved.path).ok()) << "the unedited record must load: " << record.dump();
    c.edit(record);
    RewriteAutoCapsRecord(manifest, record);
    const absl::Status status = LoadCheckpoint(saved.path).status();
    EXPECT_TRUE(absl::IsDataLoss(status)) << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr("checkpoint file " + manifest + ": " + c.message))
        << record.dump();
  }
}

TEST(AutoBucketCapsRecordTest, SaveRejectsAnInvalidRecord) {
  const std::string dir = FreshDir("invalid_auto_caps");
  auto model = Model(1, "mlp");
  Checkpoint checkpoint = CaptureCheckpoint(*model, nullptr, {}, nullptr, 1, 0);
  checkpoint.auto_bucket_caps = AutoBucketCapsRecord{1, 25, 0, "gloo"};
  absl::Status status = SaveCheckpoint(dir, checkpoint);
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("\"auto_bucket_caps.world_size\" must be >= 1, got 0"));
  checkpoint.auto_bucket_caps = AutoBucketCapsRecord{std::nan(""), 25, 2, "gloo"};
  status = SaveCheckpoint(dir, checkpoint);
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("\"auto_bucket_caps.first_bucket_cap_mib\" must be >= 0"));
  EXPECT_TRUE(absl::IsNotFound(LoadLatestCheckpoint(dir).status()));
}

}  // namespace
}  // namespace ddp
