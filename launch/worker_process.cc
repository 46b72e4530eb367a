#include "launch/worker_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/check.h"

extern char** environ;

namespace ddp {
namespace {

// "KEY=VALUE" strings: the parent's environment with `overrides` replacing or adding entries.
std::vector<std::string> MergedEnvironment(const std::map<std::string, std::string>& overrides) {
  std::vector<std::string> merged;
  for (char** e = environ; *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    std::string key = eq == nullptr ? std::string(*e) : std::string(*e, eq - *e);
    if (overrides.count(key) == 0) merged.emplace_back(*e);
  }
  for (const auto& [key, value] : overrides) merged.push_back(absl::StrCat(key, "=", value));
  return merged;
}

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// In the child after fork: only async-signal-safe calls. Note [Workers die with their launcher]: the
// kernel SIGKILLs the child when the thread that forked it ends (ddprun killed, even by SIGKILL, which
// no handler sees); a launcher that died between fork and prctl is caught by comparing getppid() with
// `launcher`, since the child was then already reparented.
[[noreturn]] void ExecChild(pid_t launcher, int out_w, int err_w, char** argv, char** envp) {
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != launcher) ::_exit(128 + SIGKILL);
  ::setpgid(0, 0);
  ::signal(SIGPIPE, SIG_DFL);  // ddprun ignores SIGPIPE; exec would keep that.
  ::signal(SIGINT, SIG_DFL);
  ::signal(SIGTERM, SIG_DFL);
  int null_fd = ::open("/dev/null", O_RDONLY);
  if (null_fd >= 0) ::dup2(null_fd, 0);
  ::dup2(out_w, 1);
  ::dup2(err_w, 2);
  ::execvpe(argv[0], argv, envp);
  const char* reason = std::strerror(errno);
  (void)!::write(2, "ddprun: cannot execute ", 23);
  (void)!::write(2, argv[0], std::strlen(argv[0]));
  (void)!::write(2, ": ", 2);
  (void)!::write(2, reason, std::strlen(reason));
  (void)!::write(2, "\n", 1);
  ::_exit(127);
}

}  // namespace

WorkerProcess::WorkerProcess(pid_t pid, UniqueFd stdout_fd, UniqueFd stderr_fd)
    : pid_(pid), stdout_(std::move(stdout_fd)), stderr_(std::move(stderr_fd)) {}

absl::StatusOr<std::unique_ptr<WorkerProcess>> WorkerProcess::Start(
    const std::vector<std::string>& argv, const std::map<std::string, std::string>& env) {
  DDP_CHECK(!argv.empty()) << "no program to start";
  std::vector<std::string> args = argv;
  std::vector<std::string> envs = MergedEnvironment(env);
  std::vector<char*> c_args = CStrings(args), c_envs = CStrings(envs);
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return absl::ResourceExhaustedError("pipe failed");
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    return absl::ResourceExhaustedError("pipe failed");
  }
  UniqueFd out_r(out[0]), out_w(out[1]), err_r(err[0]), err_w(err[1]);
  const pid_t launcher = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return absl::ResourceExhaustedError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) ExecChild(launcher, out_w.get(), err_w.get(), c_args.data(), c_envs.data());
  ::setpgid(pid, pid);  // Also in the parent, so Signal() works even before the child runs.
  ::fcntl(out_r.get(), F_SETFL, O_NONBLOCK);
  ::fcntl(err_r.get(), F_SETFL, O_NONBLOCK);
  return std::unique_ptr<WorkerProcess>(
      new WorkerProcess(pid, std::move(out_r), std::move(err_r)));
}

void WorkerProcess::Signal(int signal) {
  if (wait_status_.has_value()) return;
  if (::kill(-pid_, signal) != 0) ::kill(pid_, signal);
}

std::optional<int> WorkerProcess::TryReap() {
  if (wait_status_.has_value()) return wait_status_;
  int status = 0;
  struct rusage usage = {};
  pid_t r;
  do {
    r = ::wait4(pid_, &status, WNOHANG, &usage);
  } while (r < 0 && errno == EINTR);
  if (r == pid_) {
    wait_status_ = status;
    peak_rss_bytes_ = static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux gives KiB
  }
  return wait_status_;
}

int ExitCodeFromWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

}  // namespace ddp
