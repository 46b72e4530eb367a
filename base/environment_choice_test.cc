// EnvironmentChoice maps each listed value to its index, unset and empty to 0, and stops on anything else
// with a message naming the variable, its value and the values expected; EnvironmentSwitch likewise.
#include "base/environment_choice.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace ddp {
namespace {

constexpr char kName[] = "DDP_ENVIRONMENT_CHOICE_TEST";

TEST(EnvironmentChoiceTest, UnsetAndEmptyPickTheFirstValue) {
  unsetenv(kName);
  EXPECT_EQ(EnvironmentChoice(kName, {"auto", "on", "off"}), 0u);
  setenv(kName, "", 1);
  EXPECT_EQ(EnvironmentChoice(kName, {"auto", "on", "off"}), 0u);
  EXPECT_FALSE(EnvironmentSwitch(kName, "0", "1"));
}

TEST(EnvironmentChoiceTest, EachValueMapsToItsIndex) {
  const char* values[] = {"auto", "onednn", "winograd", "im2col"};
  for (size_t i = 0; i < 4; ++i) {
    setenv(kName, values[i], 1);
    EXPECT_EQ(EnvironmentChoice(kName, {"auto", "onednn", "winograd", "im2col"}), i) << values[i];
  }
  setenv(kName, "1", 1);
  EXPECT_TRUE(EnvironmentSwitch(kName, "0", "1"));
  setenv(kName, "0", 1);
  EXPECT_FALSE(EnvironmentSwitch(kName, "0", "1"));
  unsetenv(kName);
}

TEST(EnvironmentChoiceDeathTest, AnUnknownValueStopsNamingWhatWasExpected) {
  setenv(kName, "Winograd", 1);  // matching is exact: case matters
  EXPECT_DEATH(EnvironmentChoice(kName, {"auto", "onednn", "winograd"}),
               "DDP_ENVIRONMENT_CHOICE_TEST=\"Winograd\": expected auto, onednn or winograd");
  setenv(kName, "yes", 1);
  EXPECT_DEATH(EnvironmentSwitch(kName, "0", "1"), "DDP_ENVIRONMENT_CHOICE_TEST=\"yes\": expected 0 or 1");
  unsetenv(kName);
}

}  // namespace
}  // namespace ddp
