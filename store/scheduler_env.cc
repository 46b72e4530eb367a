#include "store/scheduler_env.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace ddp {
namespace {

absl::Status BadList(absl::string_view list, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("Slurm host list \"", list, "\": ", why));
}

// Splits at commas outside brackets.
absl::StatusOr<std::vector<absl::string_view>> SplitTopLevel(absl::string_view list) {
  std::vector<absl::string_view> items;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    const char c = i < list.size() ? list[i] : ',';
    if (c == '[') ++depth;
    if (c == ']' && --depth < 0) return BadList(list, "unbalanced ']'");
    if (c == ',' && depth == 0) {
      if (i == start) return BadList(list, "empty host name");
      items.push_back(list.substr(start, i - start));
      start = i + 1;
    }
  }
  if (depth != 0) return BadList(list, "unbalanced '['");
  return items;
}

// Appends the numbers of one bracket group ("01-04,07") as zero-padded text.
absl::Status ExpandRanges(absl::string_view list, absl::string_view ranges, std::vector<std::string>* out) {
  for (absl::string_view range : absl::StrSplit(ranges, ',')) {
    std::pair<absl::string_view, absl::string_view> bounds = absl::StrSplit(range, absl::MaxSplits('-', 1));
    if (bounds.second.empty()) bounds.second = bounds.first;
    uint64_t low = 0, high = 0;
    if (!absl::SimpleAtoi(bounds.first, &low) || !absl::SimpleAtoi(bounds.second, &high) || low > high) {
      return BadList(list, absl::StrCat("bad range \"", range, "\""));
    }
    if (high - low >= kMaxSlurmHosts) return BadList(list, "more than kMaxSlurmHosts names");
    for (uint64_t n = low; n <= high; ++n) {
      std::string text = absl::StrCat(n);
      if (text.size() < bounds.first.size()) text.insert(0, bounds.first.size() - text.size(), '0');
      out->push_back(std::move(text));
    }
  }
  return absl::OkStatus();
}

// Expands one host pattern (possibly several bracket groups) after `prefix` into `out`.
absl::Status ExpandPattern(absl::string_view list, const std::string& prefix, absl::string_view pattern,
                           std::vector<std::string>* out) {
  const size_t open = pattern.find('[');
  if (open == absl::string_view::npos) {
    if (out->size() >= kMaxSlurmHosts) return BadList(list, "more than kMaxSlurmHosts names");
    out->push_back(absl::StrCat(prefix, pattern));
    return absl::OkStatus();
  }
  const size_t close = pattern.find(']', open);
  if (close == absl::string_view::npos) return BadList(list, "unbalanced '['");
  std::vector<std::string> numbers;
  if (absl::Status s = ExpandRanges(list, pattern.substr(open + 1, close - open - 1), &numbers); !s.ok()) {
    return s;
  }
  const std::string head = absl::StrCat(prefix, pattern.substr(0, open));
  for (const std::string& number : numbers) {
    if (absl::Status s = ExpandPattern(list, head + number, pattern.substr(close + 1), out); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ExpandSlurmNodeList(absl::string_view list) {
  if (list.empty()) return BadList(list, "empty");
  absl::StatusOr<std::vector<absl::string_view>> items = SplitTopLevel(list);
  if (!items.ok()) return items.status();
  std::vector<std::string> hosts;
  for (absl::string_view item : *items) {
    if (absl::Status s = ExpandPattern(list, "", item, &hosts); !s.ok()) return s;
  }
  return hosts;
}

absl::StatusOr<std::vector<int>> ExpandSlurmTasksPerNode(absl::string_view value) {
  const auto bad = [value] {
    return absl::InvalidArgumentError(
        absl::StrCat("Slurm tasks per node \"", value, "\": expected counts such as 2(x3),1"));
  };
  std::vector<int> counts;
  for (absl::string_view item : absl::StrSplit(value, ',')) {
    int count = 0, repeat = 1;
    const size_t paren = item.find("(x");
    if (paren != absl::string_view::npos) {
      if (item.back() != ')' ||
          !absl::SimpleAtoi(item.substr(paren + 2, item.size() - paren - 3), &repeat) || repeat < 1) {
        return bad();
      }
      item = item.substr(0, paren);
    }
    if (!absl::SimpleAtoi(item, &count) || count < 1 || counts.size() + repeat > kMaxSlurmHosts) return bad();
    counts.insert(counts.end(), repeat, count);
  }
  return counts;
}

std::optional<std::string> OpenMpiLauncherAddress(absl::string_view hnp_uri) {
  for (absl::string_view entry : absl::StrSplit(hnp_uri, ';')) {
    if (!absl::ConsumePrefix(&entry, "tcp://")) continue;
    const size_t end = entry.find_first_of(",:");
    if (end == 0) continue;
    return std::string(entry.substr(0, end));
  }
  return std::nullopt;
}

}  // namespace ddp
