#include "base/cgroup_dir.h"

#include <algorithm>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"

namespace ddp {
namespace {

bool Lists(absl::string_view list, char separator, absl::string_view item) {
  const std::vector<absl::string_view> items = absl::StrSplit(list, separator, absl::SkipEmpty());
  return std::find(items.begin(), items.end(), item) != items.end();
}

// A mounted hierarchy: where it is mounted and which cgroup path its root is.
struct Mount {
  std::string point;
  std::string root;
};

// The directory of cgroup `path` in hierarchy `m`.
std::string DirOf(const Mount& m, absl::string_view path) {
  if (m.root != "/" && !absl::ConsumePrefix(&path, m.root)) path = "";
  while (absl::ConsumeSuffix(&path, "/")) {
  }
  return m.point + std::string(path);
}

}  // namespace

std::vector<std::string> KernelFileLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<std::string> CgroupDir::UpToMountPoint() const {
  std::vector<std::string> dirs;
  for (std::string dir = path;; dir = dir.substr(0, dir.rfind('/'))) {
    dirs.push_back(dir);
    if (dir.size() <= mount_point.size() || dir.rfind('/') == std::string::npos) break;
  }
  return dirs;
}

std::optional<CgroupDir> FindCgroupDir(absl::string_view controller, const KernelFiles& files) {
  std::optional<Mount> v2, v1;
  for (const std::string& line : KernelFileLines(files.mountinfo)) {
    // "<id> <parent> <dev> <root> <mount point> <options> [optional...] - <type> <source> <super options>"
    const std::vector<std::string> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    const size_t dash = std::find(fields.begin(), fields.end(), "-") - fields.begin();
    if (dash < 5 || dash + 1 >= fields.size()) continue;
    const std::string& type = fields[dash + 1];
    const Mount mount{files.mount_prefix + fields[4], fields[3]};
    if (type == "cgroup2" && !v2.has_value()) v2 = mount;
    if (type == "cgroup" && !v1.has_value() && dash + 3 < fields.size() &&
        Lists(fields[dash + 3], ',', controller)) {
      v1 = mount;
    }
  }
  std::optional<std::string> v2_path, v1_path;
  for (const std::string& line : KernelFileLines(files.self_cgroup)) {
    // "<id>:<controllers>:<path>"; v2 is "0::<path>".
    const std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() != 3) continue;
    if (parts[0] == "0" && parts[1].empty()) v2_path = parts[2];
    if (Lists(parts[1], ',', controller)) v1_path = parts[2];
  }
  if (v2.has_value() && v2_path.has_value()) {
    const std::string dir = DirOf(*v2, *v2_path);
    const std::vector<std::string> controllers = KernelFileLines(dir + "/cgroup.controllers");
    if (!controllers.empty() && Lists(controllers[0], ' ', controller)) {
      return CgroupDir{dir, v2->point, true};
    }
  }
  if (v1.has_value() && v1_path.has_value()) return CgroupDir{DirOf(*v1, *v1_path), v1->point, false};
  return std::nullopt;
}

}  // namespace ddp
