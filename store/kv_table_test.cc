#include "store/kv_table.h"

#include <limits>

#include "gtest/gtest.h"

namespace ddp {
namespace {

TEST(KvTableTest, AddRejectsOverflowAndKeepsTheValue) {
  KvTable table;
  table.Set("n", std::to_string(std::numeric_limits<int64_t>::max()));
  EXPECT_EQ(table.Add("n", 1).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(*table.Find("n"), std::to_string(std::numeric_limits<int64_t>::max()));
}

TEST(KvTableTest, CompareSetReportsWhetherItSwapped) {
  KvTable table;
  EXPECT_TRUE(table.CompareSet("k", "", "v").swapped);
  EXPECT_FALSE(table.CompareSet("k", "", "w").swapped);
  EXPECT_EQ(table.CompareSet("k", "", "w").value, "v");
}

TEST(KvTableTest, MissingKeepsOrder) {
  KvTable table;
  table.Set("b", "");
  EXPECT_EQ(table.Missing({"c", "b", "a"}), (std::vector<std::string>{"c", "a"}));
}

TEST(AddToStoredIntegerTest, ParsesDecimalOnly) {
  const std::string ok = "-12", bad = "12x";
  EXPECT_EQ(*AddToStoredInteger("k", &ok, 2), -10);
  EXPECT_EQ(*AddToStoredInteger("k", nullptr, 7), 7);
  EXPECT_FALSE(AddToStoredInteger("k", &bad, 1).ok());
}

}  // namespace
}  // namespace ddp
