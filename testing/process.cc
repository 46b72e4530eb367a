#include "testing/process.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace ddp {
namespace {

// Reads both pipes until they close or the deadline passes (then kills `pid`); signals `pid` on the way
// when asked.
void Collect(pid_t pid, int out_fd, int err_fd, const RunOptions& options, absl::Time start, ProcessResult* result) {
  std::string* sinks[2] = {&result->out, &result->err};
  pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
  bool signalled = options.signal == 0;
  int open_fds = 2;
  while (open_fds > 0) {
    const absl::Duration now = absl::Now() - start;
    if (now > options.timeout) {
      ::kill(pid, SIGKILL);
      ADD_FAILURE() << "process did not finish within " << options.timeout;
      break;
    }
    if (!signalled && now >= options.signal_after) {
      ::kill(pid, options.signal);
      signalled = true;
    }
    if (::poll(fds, 2, 20) <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buffer[4096];
      const ssize_t n = ::read(fds[i].fd, buffer, sizeof(buffer));
      if (n > 0) {
        sinks[i]->append(buffer, n);
      } else {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (const pollfd& fd : fds) {
    if (fd.fd >= 0) ::close(fd.fd);
  }
}

}  // namespace

std::string Runfile(const std::string& path) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir == nullptr || workspace == nullptr) return path;
  return absl::StrCat(srcdir, "/", workspace, "/", path);
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

ProcessResult RunProcess(const std::vector<std::string>& argv, const RunOptions& options) {
  int out[2], err[2];
  EXPECT_EQ(::pipe(out), 0);
  EXPECT_EQ(::pipe(err), 0);
  const absl::Time start = absl::Now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    for (const std::string& assignment : options.env) ::putenv(const_cast<char*>(assignment.c_str()));
    std::vector<char*> c_argv;
    for (const std::string& a : argv) c_argv.push_back(const_cast<char*>(a.c_str()));
    c_argv.push_back(nullptr);
    ::execv(c_argv[0], c_argv.data());
    ::_exit(126);
  }
  ::close(out[1]);
  ::close(err[1]);
  ProcessResult result;
  Collect(pid, out[0], err[0], options, start, &result);
  int status = 0;
  ::waitpid(pid, &status, 0);
  result.elapsed = absl::Now() - start;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

ProcessResult RunShell(const std::string& command, absl::Duration timeout) {
  RunOptions options;
  options.timeout = timeout;
  return RunProcess({"/bin/sh", "-c", command + " 2>&1"}, options);
}

int RunShell(const std::string& command, std::string* output) {
  ProcessResult result = RunShell(command);
  output->append(result.out);
  return result.exit_code;
}

}  // namespace ddp
