#include "launch/virtual_local_rank.h"

#include <optional>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/check.h"

namespace ddp {
namespace {

// The variable that lists the launcher's devices (HIP_VISIBLE_DEVICES wins when set and not empty, as
// on ROCm), its value, and whether it is set at all.
struct VisibleDevices {
  std::string variable = "CUDA_VISIBLE_DEVICES";
  std::string value;
  bool set = false;
};

VisibleDevices LauncherDevices(const EnvLookup& env) {
  VisibleDevices d;
  const std::optional<std::string> hip = env("HIP_VISIBLE_DEVICES");
  if (hip.has_value() && !hip->empty()) {
    d.variable = "HIP_VISIBLE_DEVICES";
    d.value = *hip;
    d.set = true;
    return d;
  }
  const std::optional<std::string> cuda = env("CUDA_VISIBLE_DEVICES");
  if (cuda.has_value()) {
    d.value = *cuda;
    d.set = true;
  }
  return d;
}

}  // namespace

absl::Status CheckVirtualLocalRank(int nproc_per_node, const EnvLookup& launcher_env) {
  const VisibleDevices d = LauncherDevices(launcher_env);
  if (!d.set) return absl::OkStatus();
  const std::vector<std::string> devices = absl::StrSplit(d.value, ',');
  if (nproc_per_node > static_cast<int>(devices.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--virtual_local_rank: local_rank ", devices.size(), " exceeds available GPUs in ", d.variable, "=",
        d.value, " (", devices.size(), " device(s) for --nproc_per_node=", nproc_per_node, ")"));
  }
  return absl::OkStatus();
}

void ApplyVirtualLocalRank(int local_rank, const EnvLookup& launcher_env,
                           std::map<std::string, std::string>* worker_env) {
  const VisibleDevices d = LauncherDevices(launcher_env);
  std::string device = absl::StrCat(local_rank);
  if (d.set) {
    const std::vector<std::string> devices = absl::StrSplit(d.value, ',');
    DDP_CHECK(local_rank < static_cast<int>(devices.size())) << "CheckVirtualLocalRank was not called";
    device = std::string(absl::StripAsciiWhitespace(devices[local_rank]));
  }
  (*worker_env)["LOCAL_RANK"] = "0";
  (*worker_env)["CUDA_VISIBLE_DEVICES"] = device;
  if (d.variable == "HIP_VISIBLE_DEVICES") (*worker_env)["HIP_VISIBLE_DEVICES"] = device;
}

}  // namespace ddp
