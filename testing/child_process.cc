#include "testing/child_process.h"

#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ddp {
namespace {

// The child's exit code when `set_up` refused; other exit codes are body's absl::StatusCode.
constexpr int kSkipped = 77;

// What the child does: set up, run the body, write the message to `fd` and exit with the code.
[[noreturn]] void ChildMain(int fd, const std::function<std::string()>& set_up,
                            const std::function<absl::Status()>& body) {
  std::string message = set_up();
  int exit_code = kSkipped;
  if (message.empty()) {
    const absl::Status status = body();
    message = std::string(status.message());
    exit_code = static_cast<int>(status.code());
  }
  (void)!::write(fd, message.data(), message.size());
  ::_exit(exit_code);
}

}  // namespace

ChildRun RunInChild(const std::function<std::string()>& set_up, const std::function<absl::Status()>& body) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return {false, absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)))};
  const pid_t child = ::fork();
  if (child == 0) ChildMain(pipe_fds[1], set_up, body);
  ::close(pipe_fds[1]);
  std::string message;
  char buffer[4096];
  for (ssize_t n; (n = ::read(pipe_fds[0], buffer, sizeof(buffer))) > 0;) message.append(buffer, n);
  ::close(pipe_fds[0]);
  int wait_status = 0;
  if (child < 0 || ::waitpid(child, &wait_status, 0) != child || !WIFEXITED(wait_status)) {
    return {false, absl::UnknownError(absl::StrCat("the child process did not exit normally: ", message))};
  }
  const int code = WEXITSTATUS(wait_status);
  if (code == kSkipped) return {true, absl::UnavailableError(message)};
  return {false, absl::Status(static_cast<absl::StatusCode>(code), message)};
}

std::string LimitFileSize(int64_t bytes) {
  ::signal(SIGXFSZ, SIG_IGN);  // a write past the limit then fails with EFBIG instead of killing
  const rlimit limit{static_cast<rlim_t>(bytes), static_cast<rlim_t>(bytes)};
  if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) return absl::StrCat("setrlimit: ", std::strerror(errno));
  return "";
}

std::string MakeDirectoryReadOnly(const std::string& dir) {
  if (::geteuid() != 0) {
    if (::chmod(dir.c_str(), 0500) != 0) return absl::StrCat("chmod ", dir, ": ", std::strerror(errno));
    return "";
  }
  if (::unshare(CLONE_NEWNS) != 0) return absl::StrCat("unshare(CLONE_NEWNS): ", std::strerror(errno));
  const char* path = dir.c_str();
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
      ::mount(path, path, nullptr, MS_BIND, nullptr) != 0 ||
      ::mount(nullptr, path, nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) != 0) {
    return absl::StrCat("read-only bind mount of ", dir, ": ", std::strerror(errno));
  }
  return "";
}

}  // namespace ddp
