#include "comm/shm/small_dev_shm.h"

#include <sched.h>
#include <sys/mount.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ddp {

std::string MountSmallDevShm(size_t bytes) {
  if (unshare(CLONE_NEWNS) != 0) return absl::StrCat("unshare(CLONE_NEWNS): ", std::strerror(errno));
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return absl::StrCat("making the mounts private: ", std::strerror(errno));
  }
  const std::string size = absl::StrCat("size=", bytes);
  if (mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, size.c_str()) != 0) {
    return absl::StrCat("mounting a tmpfs of ", bytes, " bytes on /dev/shm: ", std::strerror(errno));
  }
  return "";
}

}  // namespace ddp
