#include "launch/local_devices.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/usable_cpus.h"

namespace ddp {

LocalDevices DetectLocalDevices() {
  LocalDevices devices;
  devices.cpus = UsableCpus();
  int nodes = 0;
  while (nodes < 64 && ::access(absl::StrCat("/dev/nvidia", nodes).c_str(), F_OK) == 0) ++nodes;
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible != nullptr) {
    int named = 0;
    for (absl::string_view item : absl::StrSplit(visible, ',')) {
      if (item.empty() || item == "-1") break;  // CUDA stops at the first invalid entry
      ++named;
    }
    nodes = std::min(nodes, named);
  }
  devices.gpus = nodes;
  return devices;
}

}  // namespace ddp
