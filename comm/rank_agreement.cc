#include "comm/rank_agreement.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "store/byte_codec.h"

namespace ddp {
namespace {

constexpr size_t kMaxFieldBytes = size_t{1} << 26;
constexpr size_t kShownValueChars = 200;

std::string Shown(const std::string& value) {
  if (value.size() <= kShownValueChars) return value;
  return absl::StrCat(value.substr(0, kShownValueChars), "... (", value.size(), " characters)");
}

// "25 on ranks 0, 2 and 0 on rank 1": each distinct value with the ranks that hold it, in rank order.
std::string ValuesByRank(const std::vector<std::string>& values) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<int>> ranks;
  for (int r = 0; r < static_cast<int>(values.size()); ++r) {
    if (ranks[values[r]].empty()) order.push_back(values[r]);
    ranks[values[r]].push_back(r);
  }
  std::vector<std::string> parts;
  for (const std::string& v : order) {
    const std::vector<int>& holders = ranks[v];
    parts.push_back(absl::StrCat(v.empty() ? "(empty)" : Shown(v), holders.size() == 1 ? " on rank " : " on ranks ",
                                 absl::StrJoin(holders, ", ")));
  }
  return absl::StrJoin(parts, " and ");
}

}  // namespace

std::string EncodeAgreedFields(const std::vector<AgreedField>& fields) {
  std::string out;
  for (const AgreedField& f : fields) {
    AppendBytes(&out, f.name);
    AppendBytes(&out, f.value);
  }
  return out;
}

bool DecodeAgreedFields(absl::string_view bytes, std::vector<AgreedField>* fields) {
  ByteReader reader(bytes);
  while (reader.remaining() > 0) {
    AgreedField f;
    if (!reader.ReadBytes(kMaxFieldBytes, &f.name) || !reader.ReadBytes(kMaxFieldBytes, &f.value))
      return false;
    fields->push_back(std::move(f));
  }
  return true;
}

absl::Status CheckRanksAgree(ProcessGroup& group, const std::vector<AgreedField>& fields, absl::string_view what) {
  std::vector<std::string> gathered;
  const absl::Status exchange = group.AllGatherObject(EncodeAgreedFields(fields), &gathered);
  if (!exchange.ok()) {
    return absl::Status(exchange.code(), absl::StrCat(what, ": exchanging settings failed: ", exchange.message()));
  }
  std::vector<std::vector<AgreedField>> all(gathered.size());
  for (size_t r = 0; r < gathered.size(); ++r) {
    if (!DecodeAgreedFields(gathered[r], &all[r])) {
      return absl::DataLossError(absl::StrCat(what, ": rank ", r, " sent malformed settings"));
    }
  }
  size_t longest = 0;
  for (const auto& f : all) longest = std::max(longest, f.size());
  for (size_t i = 0; i < longest; ++i) {
    std::vector<std::string> names, values;
    for (const auto& f : all) {
      names.push_back(i < f.size() ? f[i].name : "(missing)");
      values.push_back(i < f.size() ? f[i].value : "(missing)");
    }
    if (std::equal(names.begin() + 1, names.end(), names.begin()) &&
        std::equal(values.begin() + 1, values.end(), values.begin())) {
      continue;
    }
    if (!std::equal(names.begin() + 1, names.end(), names.begin())) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, " differ across ranks: setting ", i, " is ", ValuesByRank(names)));
    }
    return absl::FailedPreconditionError(
        absl::StrCat(what, " differ across ranks: ", names[0], " is ", ValuesByRank(values)));
  }
  return absl::OkStatus();
}

}  // namespace ddp
