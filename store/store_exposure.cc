#include "store/store_exposure.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>

#include "absl/strings/str_cat.h"

namespace ddp {
namespace {

using AddrInfoList = std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)>;

// The addresses `host` resolves to for a TCP socket (of `family`: AF_UNSPEC for any), or null.
AddrInfoList Resolve(const std::string& host, int family) {
  addrinfo hints = {};
  hints.ai_family = family;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  if (host.empty() || ::getaddrinfo(host.c_str(), nullptr, &hints, &list) != 0) list = nullptr;
  return AddrInfoList(list, &::freeaddrinfo);
}

bool IsLoopbackAddress(const sockaddr* address) {
  if (address->sa_family == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in*>(address)->sin_addr.s_addr) >> 24) == 127;
  }
  if (address->sa_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(&a) || (IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127);
  }
  return false;
}

// True when this host owns `ai`'s address: a socket can be bound to it (port 0, closed at once).
bool IsOwnAddress(const addrinfo* ai) {
  const int fd = ::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool bound = ::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0;  // the port in ai_addr is 0
  ::close(fd);
  return bound;
}

std::string NumericHost(const addrinfo* ai) {
  char text[NI_MAXHOST] = {0};
  if (::getnameinfo(ai->ai_addr, ai->ai_addrlen, text, sizeof(text), nullptr, 0, NI_NUMERICHOST) != 0) return "";
  return text;
}

}  // namespace

bool IsLoopbackHost(const std::string& host) {
  AddrInfoList list = Resolve(host, AF_UNSPEC);
  if (list == nullptr) return false;
  for (const addrinfo* ai = list.get(); ai != nullptr; ai = ai->ai_next) {
    if (!IsLoopbackAddress(ai->ai_addr)) return false;
  }
  return true;
}

std::string StoreListenHost(const std::string& master_addr) {
  for (int family : {AF_INET, AF_INET6}) {  // IPv4 first: Gloo's pairs and most MASTER_ADDRs are IPv4
    AddrInfoList list = Resolve(master_addr, family);
    for (const addrinfo* ai = list.get(); ai != nullptr; ai = ai->ai_next) {
      if (!IsOwnAddress(ai)) continue;
      if (std::string numeric = NumericHost(ai); !numeric.empty() && numeric != "0.0.0.0" && numeric != "::") {
        return numeric;
      }
    }
  }
  return "0.0.0.0";
}

absl::Status CheckStoreExposure(const std::string& listen_host, int port, absl::string_view token) {
  if (!token.empty() || IsLoopbackHost(listen_host)) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "the TCP store on ", listen_host, ":", port,
      " would accept any client that can reach it: beyond loopback a job token is required (set DDP_JOB_TOKEN or "
      "DDP_JOB_TOKEN_FILE to the same secret for every rank; ddprun: --job_token or --job_token_file)"));
}

}  // namespace ddp
