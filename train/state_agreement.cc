#include "train/state_agreement.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/fnv1a.h"
#include "ddp/desync_check.h"
#include "store/byte_codec.h"

namespace ddp {
namespace {

// A key or detail longer than this is not one that CheckRanksHoldTheSame's callers send.
constexpr size_t kMaxPartBytes = size_t{1} << 20;

}  // namespace

uint64_t ModuleStateFingerprint(const Module& module) {
  uint64_t hash = kFnv1a64Offset;
  for (const auto& [name, checksum] : StateChecksums(module)) {
    hash = Fnv1a64(name.data(), name.size(), hash);
    hash = Fnv1a64(&checksum, sizeof(checksum), hash);
  }
  return hash;
}

std::string FingerprintText(uint64_t fingerprint) { return absl::StrFormat("%016x", fingerprint); }

absl::Status CheckRanksHoldTheSame(ProcessGroup& group, absl::string_view what, const std::string& key,
                                   const std::string& detail) {
  std::string mine;
  AppendBytes(&mine, key);
  AppendBytes(&mine, detail);
  std::vector<std::string> gathered;
  const absl::Status exchange = group.AllGatherObject(mine, &gathered);
  if (!exchange.ok()) return absl::Status(exchange.code(), absl::StrCat(what, ": ", exchange.message()));
  std::vector<std::string> keys(gathered.size()), details(gathered.size());
  for (size_t r = 0; r < gathered.size(); ++r) {
    ByteReader reader(gathered[r]);
    if (!reader.ReadBytes(kMaxPartBytes, &keys[r]) || !reader.ReadBytes(kMaxPartBytes, &details[r])) {
      return absl::DataLossError(absl::StrCat(what, ": rank ", r, " sent a malformed description"));
    }
  }
  bool all_equal = true;
  for (const std::string& k : keys) all_equal = all_equal && k == keys[0];
  if (all_equal) return absl::OkStatus();
  // Each distinct key with the ranks that hold it, in the order of its first rank.
  std::vector<std::string> parts;
  std::vector<bool> shown(keys.size(), false);
  for (size_t first = 0; first < keys.size(); ++first) {
    if (shown[first]) continue;
    std::vector<size_t> holders;
    for (size_t r = first; r < keys.size(); ++r) {
      if (!shown[r] && keys[r] == keys[first]) {
        holders.push_back(r);
        shown[r] = true;
      }
    }
    parts.push_back(absl::StrCat(holders.size() == 1 ? "rank " : "ranks ", absl::StrJoin(holders, ", "), ": ",
                                 details[first]));
  }
  return absl::FailedPreconditionError(absl::StrCat(what, ": ", absl::StrJoin(parts, "; ")));
}

LoadedData DescribeLoadedData(const std::string& folder, const ImageDataset* train,
                              const ImageDataset& test) {
  uint64_t fingerprint = test.Fingerprint();
  std::string sizes = absl::StrCat(test.Size(), " test images");
  if (train != nullptr) {
    fingerprint = fingerprint * 0x100000001b3ull ^ train->Fingerprint();
    sizes = absl::StrCat(train->Size(), " training, ", sizes);
  }
  const std::string key = FingerprintText(fingerprint);
  return {key, absl::StrCat(folder, " (", sizes, "; data ", key, ")")};
}

absl::Status CheckRanksLoadedTheSameData(ProcessGroup& group, const LoadedData& loaded) {
  return CheckRanksHoldTheSame(group, "the ranks loaded different data", loaded.key, loaded.detail);
}

}  // namespace ddp
