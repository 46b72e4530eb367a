// AutoBucketCaps::ResumeFrom (Note [Auto bucket caps] step 4) on two ranks as threads: a checkpoint's
// choice made for this world size and backend is applied on every rank without measuring, whatever the
// other ranks were handed (rank 0's record decides); one made for another world size or backend is not.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "train/auto_bucket_caps.h"
#include "gmock/gmock.h"
#include "nn/models.h"
#include "testing/run_ranks.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;

constexpr double kInf = std::numeric_limits<double>::infinity();

// What one rank looks like after ResumeFrom.
struct Resumed {
  BucketCaps caps;                              // the Reducer's
  bool chosen = false;                          // the controller counts as chosen
  std::optional<AutoBucketCapsRecord> record;   // what its next checkpoint would record
};

// Wraps an MLP in DDP on two ranks, attaches the controller and resumes rank r from `records[r]`; rank
// 0's output goes to `*log`.
std::vector<Resumed> ResumeOnTwoRanks(const std::vector<std::optional<AutoBucketCapsRecord>>& records,
                                      std::string* log) {
  std::vector<Resumed> results(2);
  char* buffer = nullptr;
  size_t size = 0;
  FILE* out = open_memstream(&buffer, &size);
  RunRanks(2, [&](int rank, ProcessGroup& group) {
    Generator generator(1);
    auto ddp = DistributedDataParallel::Create(*MakeModel("mlp", generator), &group);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    std::unique_ptr<AutoBucketCaps> controller = AutoBucketCaps::Attach(**ddp, {}, rank == 0 ? out : nullptr);
    const absl::Status status = controller->ResumeFrom(records[rank], "/ckpt/step-12");
    ASSERT_TRUE(status.ok()) << status;
    results[rank] = {(*ddp)->reducer().caps(), controller->chosen(), controller->Record()};
  });
  std::fclose(out);
  *log = std::string(buffer, size);
  std::free(buffer);
  return results;
}

TEST(AutoBucketCapsResumeTest, AChoiceForThisWorldSizeAndBackendIsAppliedOnEveryRank) {
  const AutoBucketCapsRecord saved{0.0625, kInf, 2, "gloo", 0.012, 0.013};
  std::string log;
  // Rank 1 holds no record: it follows rank 0's.
  const std::vector<Resumed> ranks = ResumeOnTwoRanks({saved, std::nullopt}, &log);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(ranks[rank].caps.first_bucket_cap_bytes, 65536u) << "rank " << rank;
    EXPECT_EQ(ranks[rank].caps.bucket_cap_bytes, SIZE_MAX) << "rank " << rank;
    EXPECT_TRUE(ranks[rank].chosen) << "rank " << rank;
  }
  ASSERT_TRUE(ranks[0].record.has_value());
  EXPECT_EQ(ranks[0].record->first_bucket_cap_mib, 0.0625);
  EXPECT_EQ(ranks[0].record->bucket_cap_mib, kInf);
  EXPECT_EQ(ranks[0].record->world_size, 2);
  EXPECT_EQ(ranks[0].record->backend, "gloo");
  EXPECT_EQ(ranks[0].record->predicted_step_s, 0.012);  // carried into the next checkpoint
  EXPECT_EQ(ranks[0].record->measured_step_s, 0.013);
  EXPECT_THAT(log, HasSubstr("auto bucket caps: reusing the choice from /ckpt/step-12: first 0.0625 MiB, cap inf "
                             "MiB, 2 buckets (chosen for 2 ranks over gloo; predicted 12.00 ms/step), not measuring "
                             "again\n"));
}

TEST(AutoBucketCapsResumeTest, AChoiceForAnotherWorldSizeOrBackendIsMeasuredAgain) {
  for (const AutoBucketCapsRecord& saved :
       {AutoBucketCapsRecord{0.0625, 1, 3, "gloo"}, AutoBucketCapsRecord{0.0625, 1, 2, "shm"}}) {
    std::string log;
    // Rank 1's record would match: rank 0's decides, so neither rank applies it.
    const std::vector<Resumed> ranks = ResumeOnTwoRanks({saved, AutoBucketCapsRecord{0.0625, 1, 2, "gloo"}}, &log);
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_EQ(ranks[rank].caps.bucket_cap_bytes, 25u << 20) << "rank " << rank << ": the default caps stay";
      EXPECT_FALSE(ranks[rank].chosen) << "rank " << rank;
      EXPECT_FALSE(ranks[rank].record.has_value()) << "rank " << rank;
    }
    EXPECT_THAT(log, HasSubstr("auto bucket caps: the choice in /ckpt/step-12 (first 0.0625 MiB, cap 1 MiB) was made "
                               "for " + std::to_string(saved.world_size) + " ranks over " + saved.backend +
                               ", this run has 2 ranks over gloo: measuring and choosing again\n"));
  }
}

TEST(AutoBucketCapsResumeTest, NoRecordChangesNothingAndSaysNothing) {
  std::string log;
  const std::vector<Resumed> ranks = ResumeOnTwoRanks({std::nullopt, std::nullopt}, &log);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(ranks[rank].caps.bucket_cap_bytes, 25u << 20);
    EXPECT_FALSE(ranks[rank].chosen);
  }
  EXPECT_EQ(log, "");
}

}  // namespace
}  // namespace ddp
