// --bucket_cap_mb=auto's record in checkpoints (AutoBucketCapsRecord as a named extra-state entry): round
// trip through a saved checkpoint, malformed records named by file and field, invalid records refused before
// anything is written, and checkpoints that keep the record as a manifest field of its own.
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_test_util.h"
#include "train/auto_bucket_caps_record.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "base/fnv1a.h"
#include "nn/sgd.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Saves `checkpoint` with `record` (absent: none) under `dir`.
void SaveWithRecord(const std::string& dir, Checkpoint checkpoint, const std::optional<AutoBucketCapsRecord>& record) {
  if (record.has_value()) {
    absl::StatusOr<std::string> text = EncodeAutoBucketCapsRecord(*record);
    ASSERT_TRUE(text.ok()) << text.status();
    checkpoint.extra_state[kAutoBucketCapsStateName] = *text;
  }
  ASSERT_TRUE(SaveCheckpoint(dir, checkpoint).ok());
}

// The record a saved checkpoint at `path` holds (absent: none); a decoding error fails the test.
std::optional<AutoBucketCapsRecord> LoadRecord(const std::string& path) {
  absl::StatusOr<Checkpoint> loaded = LoadCheckpoint(path);
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  if (!loaded.ok()) return std::nullopt;
  const auto it = loaded->extra_state.find(kAutoBucketCapsStateName);
  if (it == loaded->extra_state.end()) return std::nullopt;
  absl::StatusOr<AutoBucketCapsRecord> record = DecodeAutoBucketCapsRecord(it->second, path + "/manifest.json");
  EXPECT_TRUE(record.ok()) << record.status();
  if (!record.ok()) return std::nullopt;
  return *record;
}

// --bucket_cap_mb=auto's record: every field survives, "no cap" included; step times are optional; a
// checkpoint written without one loads without one (as older checkpoints do).
TEST(AutoBucketCapsRecordTest, RoundTrips) {
  const std::string dir = FreshDir("auto_caps");
  auto model = Model(1, "mlp");
  Sgd sgd(model->Parameters(), SgdOptions{});
  Checkpoint checkpoint = CaptureCheckpoint(*model, &sgd, SamplerState{1, 0, 64}, nullptr, 3, 1);
  const double inf = std::numeric_limits<double>::infinity();
  SaveWithRecord(dir, checkpoint, AutoBucketCapsRecord{0.0625, inf, 3, "shm", 0.01234567891, 0.0131});
  checkpoint.step = 4;
  SaveWithRecord(dir, checkpoint, AutoBucketCapsRecord{5, 25, 2, "gloo", -1, -1});
  checkpoint.step = 5;
  SaveWithRecord(dir, checkpoint, std::nullopt);

  const std::optional<AutoBucketCapsRecord> first = LoadRecord(dir + "/step-3");
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->first_bucket_cap_mib, 0.0625);
  EXPECT_EQ(first->bucket_cap_mib, inf);
  EXPECT_EQ(first->world_size, 3);
  EXPECT_EQ(first->backend, "shm");
  EXPECT_EQ(first->predicted_step_s, 0.01234567891);
  EXPECT_EQ(first->measured_step_s, 0.0131);
  EXPECT_THAT(ReadAll(dir + "/step-3/manifest.json"), HasSubstr("\\\"bucket_cap_mib\\\":\\\"inf\\\""));

  const std::optional<AutoBucketCapsRecord> second = LoadRecord(dir + "/step-4");
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->first_bucket_cap_mib, 5);
  EXPECT_EQ(second->bucket_cap_mib, 25);
  EXPECT_EQ(second->world_size, 2);
  EXPECT_EQ(second->backend, "gloo");
  EXPECT_LT(second->predicted_step_s, 0);
  EXPECT_LT(second->measured_step_s, 0);
  EXPECT_THAT(ReadAll(dir + "/step-4/manifest.json"), Not(HasSubstr("predicted_step_s")));

  EXPECT_FALSE(LoadRecord(dir + "/step-5").has_value());
  EXPECT_THAT(ReadAll(dir + "/step-5/manifest.json"), Not(HasSubstr("auto_bucket_caps")));
}

// Replaces the manifest body's record with `record` (as the extra state's text, or with `legacy` as the
// manifest field of its own that older checkpoints have) and re-seals the manifest's own checksum, as a
// buggy or hand-edited writer would: only the record's validation is left to catch it.
void RewriteAutoCapsRecord(const std::string& manifest_path, const nlohmann::ordered_json& record,
                           bool legacy = false) {
  nlohmann::ordered_json manifest = nlohmann::ordered_json::parse(ReadAll(manifest_path));
  if (legacy) {
    manifest["body"]["auto_bucket_caps"] = record;
  } else {
    manifest["body"]["extra_state"]["auto_bucket_caps"] = record.dump();
  }
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
  for (const bool legacy : {false, true}) {
    for (const Case& c : cases) {
      Saved saved = SaveTrained("malformed_auto_caps");
      const std::string manifest = saved.path + "/manifest.json";
      Json record = good;
      RewriteAutoCapsRecord(manifest, record, legacy);
      ASSERT_TRUE(LoadRecord(saved.path).has_value()) << "the unedited record must load: " << record.dump();
      c.edit(record);
      RewriteAutoCapsRecord(manifest, record, legacy);
      absl::StatusOr<Checkpoint> loaded = LoadCheckpoint(saved.path);
      ASSERT_TRUE(loaded.ok()) << loaded.status();  // the checkpoint layer does not read the record
      const absl::Status status =
          DecodeAutoBucketCapsRecord(loaded->extra_state.at(kAutoBucketCapsStateName), manifest).status();
      EXPECT_TRUE(absl::IsDataLoss(status)) << status;
      EXPECT_THAT(std::string(status.message()), HasSubstr("checkpoint file " + manifest + ": " + c.message))
          << record.dump() << (legacy ? " (as a manifest field of its own)" : "");
    }
  }
}

TEST(AutoBucketCapsRecordTest, AnInvalidRecordIsRefusedBeforeAnythingIsWritten) {
  const std::string dir = FreshDir("invalid_auto_caps");
  auto model = Model(1, "mlp");
  absl::Status status = EncodeAutoBucketCapsRecord(AutoBucketCapsRecord{1, 25, 0, "gloo"}).status();
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("\"auto_bucket_caps.world_size\" must be >= 1, got 0"));
  status = EncodeAutoBucketCapsRecord(AutoBucketCapsRecord{std::nan(""), 25, 2, "gloo"}).status();
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("\"auto_bucket_caps.first_bucket_cap_mib\" must be >= 0"));
  Checkpoint checkpoint = CaptureCheckpoint(*model, nullptr, {}, nullptr, 1, 0);
  checkpoint.extra_state[""] = "unnamed";
  status = SaveCheckpoint(dir, checkpoint);
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_TRUE(absl::IsNotFound(LoadLatestCheckpoint(dir).status()));
}

}  // namespace
}  // namespace ddp
