#include "base/cpu_identity.h"

#include <fstream>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace ddp {
namespace {

// The "key : value" fields of /proc/cpuinfo's first processor (up to its first blank line).
std::map<std::string, std::string> FirstProcessorFields() {
  std::map<std::string, std::string> fields;
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StripAsciiWhitespace(line).empty()) {
      if (!fields.empty()) break;
      continue;
    }
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    fields.emplace(std::string(absl::StripAsciiWhitespace(line.substr(0, colon))),
                   std::string(absl::StripAsciiWhitespace(line.substr(colon + 1))));
  }
  return fields;
}

std::string FieldOr(const std::map<std::string, std::string>& fields, const char* key, const char* absent) {
  const auto it = fields.find(key);
  return it == fields.end() || it->second.empty() ? absent : it->second;
}

}  // namespace

std::string CpuModelName() { return FieldOr(FirstProcessorFields(), "model name", "unknown CPU"); }

std::string CpuIdentity() {
  const std::map<std::string, std::string> fields = FirstProcessorFields();
  return absl::StrCat(FieldOr(fields, "vendor_id", "?"), " family ", FieldOr(fields, "cpu family", "?"),
                      " model ", FieldOr(fields, "model", "?"), " (",
                      FieldOr(fields, "model name", "unknown CPU"), ")");
}

}  // namespace ddp
