// CpuIdentity and CpuModelName read this machine's /proc/cpuinfo: the test checks their form and that
// they agree with each other, not any particular CPU.
#include "base/cpu_identity.h"

#include <regex>

#include "gtest/gtest.h"

namespace ddp {
namespace {

TEST(CpuIdentityTest, NamesVendorFamilyModelAndTheModelName) {
  const std::string identity = CpuIdentity(), name = CpuModelName();
  EXPECT_FALSE(name.empty());
  EXPECT_TRUE(std::regex_match(identity, std::regex(R"(\S+ family \S+ model \S+ \(.+\))"))) << identity;
  EXPECT_EQ(identity.substr(identity.size() - name.size() - 1), name + ")") << identity;
  EXPECT_EQ(CpuIdentity(), identity) << "the same text on every call";
}

}  // namespace
}  // namespace ddp
