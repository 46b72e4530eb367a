#include "base/memory_cgroup.h"

#include <algorithm>
#include <fstream>
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

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The value of the line "<key> <number>" (or "<key>: <number> kB") of `path`.
std::optional<int64_t> KeyedValue(const std::string& path, absl::string_view key) {
  for (const std::string& line : Lines(path)) {
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
  const std::vector<std::string> lines = Lines(path);
  int64_t value = 0;
  if (lines.empty() || !absl::SimpleAtoi(lines[0], &value) || value >= kNoLimit || value < 0)
    return std::nullopt;
  return value;
}

// A cgroup hierarchy as this process sees it: where it is mounted, which cgroup path its root is, and
// this process's path in it.
struct Hierarchy {
  bool found = false;
  std::string mount_point;
  std::string mount_root;
  std::string path;
};

// The directory of `h`'s cgroup: the mount point plus the process's path below the mount's root. A path
// outside that root (another namespace's view) gives the mount point itself.
std::string CgroupDir(const Hierarchy& h) {
  absl::string_view below = h.path;
  if (h.mount_root != "/" && !absl::ConsumePrefix(&below, h.mount_root)) below = "";
  while (absl::ConsumeSuffix(&below, "/")) {
  }
  return h.mount_point + std::string(below);
}

// The cgroup2 hierarchy (v2) and cgroup v1's "memory" hierarchy, from mountinfo and the process's
// cgroup file.
void FindHierarchies(const KernelMemoryFiles& files, Hierarchy* v2, Hierarchy* v1) {
  for (const std::string& line : Lines(files.mountinfo)) {
    // "<id> <parent> <dev> <root> <mount point> <options> [optional...] - <type> <source> <super options>"
    const std::vector<std::string> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    const size_t dash = std::find(fields.begin(), fields.end(), "-") - fields.begin();
    if (dash < 5 || dash + 1 >= fields.size()) continue;
    const std::string& type = fields[dash + 1];
    const std::string super_options = dash + 3 < fields.size() ? fields[dash + 3] : "";
    Hierarchy* h = nullptr;
    if (type == "cgroup2") h = v2;
    const std::vector<absl::string_view> options = absl::StrSplit(super_options, ',');
    if (type == "cgroup" && std::find(options.begin(), options.end(), "memory") != options.end()) h = v1;
    if (h == nullptr || h->found) continue;
    h->found = true;
    h->mount_root = fields[3];
    h->mount_point = files.mount_prefix + fields[4];
  }
  for (const std::string& line : Lines(files.self_cgroup)) {
    // "<id>:<controllers>:<path>"; v2 is "0::<path>".
    const std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() != 3) continue;
    if (parts[0] == "0" && parts[1].empty()) v2->path = parts[2];
    const std::vector<absl::string_view> controllers = absl::StrSplit(parts[1], ',');
    if (std::find(controllers.begin(), controllers.end(), "memory") != controllers.end()) v1->path = parts[2];
  }
}

// The smallest memory.max from `dir` up to `top` (the mount point).
std::optional<int64_t> SmallestV2Limit(std::string dir, const std::string& top) {
  std::optional<int64_t> smallest;
  while (true) {
    const std::optional<int64_t> limit = LimitValue(dir + "/memory.max");
    if (limit.has_value() && (!smallest.has_value() || *limit < *smallest)) smallest = limit;
    if (dir.size() <= top.size()) break;
    dir = dir.substr(0, dir.rfind('/'));
  }
  return smallest;
}

}  // namespace

MemoryCgroupState ReadMemoryCgroupState(const KernelMemoryFiles& files) {
  MemoryCgroupState state;
  state.host_oom_kills = KeyedValue(files.vmstat, "oom_kill");
  const std::optional<int64_t> total_kib = KeyedValue(files.meminfo, "MemTotal");
  if (total_kib.has_value()) state.host_memory_bytes = *total_kib * 1024;
  Hierarchy v2, v1;
  FindHierarchies(files, &v2, &v1);
  if (v2.found && !v2.path.empty()) {
    const std::string dir = CgroupDir(v2);
    if (std::ifstream(dir + "/memory.current").good() || std::ifstream(dir + "/memory.events").good()) {
      state.cgroup_dir = dir;
      state.cgroup_is_mount_point = dir == v2.mount_point;
      state.limit_bytes = SmallestV2Limit(dir, v2.mount_point);
      state.cgroup_oom_kills = KeyedValue(dir + "/memory.events", "oom_kill");
      return state;
    }
  }
  if (v1.found && !v1.path.empty()) {
    state.cgroup_dir = CgroupDir(v1);
    state.cgroup_is_mount_point = state.cgroup_dir == v1.mount_point;
    const std::optional<int64_t> hierarchical =
        KeyedValue(state.cgroup_dir + "/memory.stat", "hierarchical_memory_limit");
    state.limit_bytes = hierarchical.has_value() && *hierarchical < kNoLimit
                            ? hierarchical
                            : LimitValue(state.cgroup_dir + "/memory.limit_in_bytes");
    state.cgroup_oom_kills = KeyedValue(state.cgroup_dir + "/memory.oom_control", "oom_kill");
  }
  return state;
}

}  // namespace ddp
