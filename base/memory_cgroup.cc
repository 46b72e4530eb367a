#include "base/memory_cgroup.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace ddp {
namespace {

// Limits at or above this are "no limit": v1 writes PAGE_COUNTER_MAX pages (about 2^63 bytes).
constexpr int64_t kNoLimit = int64_t{1} << 62;

// The value of the line "<key> <number>" (or "<key>: <number> kB") of `path`.
std::optional<int64_t> KeyedValue(const std::string& path, absl::string_view key) {
  for (const std::string& line : KernelFileLines(path)) {
    std::vector<absl::string_view> fields = absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (fields.size() < 2) continue;
    absl::string_view name = fields[0];
    absl::ConsumeSuffix(&name, ":");
    int64_t value = 0;
    if (name == key && absl::SimpleAtoi(fields[1], &value)) return value;
  }
  return std::nullopt;
}

// A limit file's value: a byte count, or "max" / a huge number for none.
std::optional<int64_t> LimitValue(const std::string& path) {
  const std::vector<std::string> lines = KernelFileLines(path);
  int64_t value = 0;
  if (lines.empty() || !absl::SimpleAtoi(lines[0], &value) || value >= kNoLimit || value < 0) {
    return std::nullopt;
  }
  return value;
}

}  // namespace

MemoryCgroupState ReadMemoryCgroupState(const KernelFiles& files) {
  MemoryCgroupState state;
  state.host_oom_kills = KeyedValue(files.vmstat, "oom_kill");
  const std::optional<int64_t> total_kib = KeyedValue(files.meminfo, "MemTotal");
  if (total_kib.has_value()) state.host_memory_bytes = *total_kib * 1024;
  const std::optional<CgroupDir> dir = FindCgroupDir("memory", files);
  if (!dir.has_value()) return state;
  state.cgroup_dir = dir->path;
  state.cgroup_is_mount_point = dir->path == dir->mount_point;
  if (dir->v2) {
    for (const std::string& up : dir->UpToMountPoint()) {  // the smallest memory.max on the way up
      const std::optional<int64_t> limit = LimitValue(up + "/memory.max");
      if (limit.has_value() && (!state.limit_bytes.has_value() || *limit < *state.limit_bytes)) {
        state.limit_bytes = limit;
      }
    }
    state.cgroup_oom_kills = KeyedValue(dir->path + "/memory.events", "oom_kill");
    return state;
  }
  const std::optional<int64_t> hierarchical =
      KeyedValue(dir->path + "/memory.stat", "hierarchical_memory_limit");
  state.limit_bytes = hierarchical.has_value() && *hierarchical < kNoLimit
                          ? hierarchical
                          : LimitValue(dir->path + "/memory.limit_in_bytes");
  state.cgroup_oom_kills = KeyedValue(dir->path + "/memory.oom_control", "oom_kill");
  return state;
}

}  // namespace ddp
