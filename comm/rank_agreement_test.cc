#include "comm/rank_agreement.h"

#include <gtest/gtest.h>

#include <string>

#include "gmock/gmock.h"
#include "testing/run_ranks.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;

TEST(RankAgreementTest, EqualSettingsPass) {
  RunRanks(3, [](int rank, ProcessGroup& group) {
    const absl::Status status =
        CheckRanksAgree(group, {{"bucket_cap_mb", "25"}, {"layout", std::string(5000, 'x')}}, "DDP settings");
    EXPECT_TRUE(status.ok()) << "rank " << rank << ": " << status;
  });
}

TEST(RankAgreementTest, DifferingValueIsNamedWithEveryRanksValue) {
  RunRanks(3, [](int rank, ProcessGroup& group) {
    const std::string cap = rank == 1 ? "0" : "25";
    const absl::Status status =
        CheckRanksAgree(group, {{"world_size", "3"}, {"bucket_cap_mb", cap}, {"hook", "allreduce"}}, "DDP settings");
    EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
    EXPECT_EQ(status.message(), "DDP settings differ across ranks: bucket_cap_mb is 25 on ranks 0, 2 and 0 on rank 1");
  });
}

TEST(RankAgreementTest, MissingAndRenamedSettingsAreNamed) {
  RunRanks(2, [](int rank, ProcessGroup& group) {
    std::vector<AgreedField> fields = {{"a", "1"}};
    if (rank == 0) fields.push_back({"b", "2"});
    EXPECT_THAT(std::string(CheckRanksAgree(group, fields, "train settings").message()),
                HasSubstr("setting 1 is b on rank 0 and (missing) on rank 1"));
    const absl::Status long_value =
        CheckRanksAgree(group, {{"layout", std::string(300, rank == 0 ? 'a' : 'b')}}, "DDP settings");
    EXPECT_THAT(std::string(long_value.message()), HasSubstr("... (300 characters) on rank 0"));
  });
}

}  // namespace
}  // namespace ddp
