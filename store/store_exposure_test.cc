// Where a TCP store listens (MASTER_ADDR when this host owns it) and when it refuses to listen open.
#include "store/store_exposure.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <netinet/in.h>

namespace ddp {
namespace {

// A non-loopback IPv4 address of this host, or "" when it has none.
std::string OwnNonLoopbackAddress() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return "";
  std::string found;
  for (ifaddrs* i = list; i != nullptr && found.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    const in_addr a = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr;
    char text[INET_ADDRSTRLEN] = {0};
    if ((ntohl(a.s_addr) >> 24) != 127 && ::inet_ntop(AF_INET, &a, text, sizeof(text)) != nullptr) found = text;
  }
  ::freeifaddrs(list);
  return found;
}

TEST(StoreExposureTest, LoopbackHosts) {
  EXPECT_TRUE(IsLoopbackHost("127.0.0.1"));
  EXPECT_TRUE(IsLoopbackHost("127.0.0.2"));
  EXPECT_TRUE(IsLoopbackHost("localhost"));
  EXPECT_TRUE(IsLoopbackHost("::1"));
  EXPECT_FALSE(IsLoopbackHost("0.0.0.0"));
  EXPECT_FALSE(IsLoopbackHost(""));
  EXPECT_FALSE(IsLoopbackHost("198.51.100.7"));
  EXPECT_FALSE(IsLoopbackHost("no-such-host.invalid"));
}

TEST(StoreExposureTest, ListensOnMasterAddrWhenThisHostOwnsIt) {
  EXPECT_EQ(StoreListenHost("127.0.0.1"), "127.0.0.1");  // loopback stays loopback
  EXPECT_TRUE(IsLoopbackHost(StoreListenHost("localhost")));
  EXPECT_EQ(StoreListenHost("0.0.0.0"), "0.0.0.0");
  // Not an address of this host (TEST-NET-2), or no address at all: every interface.
  EXPECT_EQ(StoreListenHost("198.51.100.7"), "0.0.0.0");
  EXPECT_EQ(StoreListenHost("no-such-host.invalid"), "0.0.0.0");
  const std::string own = OwnNonLoopbackAddress();
  if (own.empty()) GTEST_SKIP() << "this host has no non-loopback IPv4 address";
  EXPECT_EQ(StoreListenHost(own), own);
}

TEST(StoreExposureTest, RefusesOnlyAnOpenStoreBeyondLoopback) {
  const absl::Status open = CheckStoreExposure("0.0.0.0", 29500, "");
  EXPECT_TRUE(absl::IsFailedPrecondition(open)) << open;
  EXPECT_EQ(open.message(),
            "the TCP store on 0.0.0.0:29500 would accept any client that can reach it: beyond loopback a job token "
            "is required (set DDP_JOB_TOKEN or DDP_JOB_TOKEN_FILE to the same secret for every rank; ddprun: "
            "--job_token or --job_token_file)");
  EXPECT_TRUE(CheckStoreExposure("0.0.0.0", 29500, "secret").ok());
  EXPECT_TRUE(CheckStoreExposure("127.0.0.1", 29500, "").ok());
  EXPECT_TRUE(CheckStoreExposure("localhost", 29500, "").ok());
  EXPECT_FALSE(CheckStoreExposure("198.51.100.7", 29500, "").ok());
}

}  // namespace
}  // namespace ddp
