#include "comm/host_identity.h"

#include <unistd.h>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace ddp {

std::string LocalHostIdentity() {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  std::string boot_id;
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::getline(in, boot_id);
  return absl::StrCat(host, " ", absl::StripAsciiWhitespace(boot_id));
}

bool AllOnOneHost(const std::vector<std::string>& identities) {
  for (const std::string& id : identities) {
    if (id != identities.front()) return false;
  }
  return true;
}

absl::StatusOr<std::vector<std::string>> ExchangeHostIdentities(Store& store, int rank, int size,
                                                                const std::string& identity,
                                                                absl::Duration timeout) {
  if (absl::Status set = store.Set(absl::StrCat("host_identity/", rank), identity); !set.ok()) return set;
  std::vector<std::string> identities;
  for (int q = 0; q < size; ++q) {
    absl::StatusOr<std::string> id = store.Get(absl::StrCat("host_identity/", q), timeout);
    if (!id.ok()) {
      return absl::Status(id.status().code(), absl::StrCat("backend auto: rank ", q,
                                                           " never published its host: ", id.status().message()));
    }
    identities.push_back(*std::move(id));
  }
  return identities;
}

}  // namespace ddp
