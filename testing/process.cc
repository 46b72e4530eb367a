#include "testing/process.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
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
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent) ::_exit(126);
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

namespace {

int ExitCode(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

// The value in kB of `field` ("VmHWM:") of /proc/<pid>/status, in bytes; -1 when unreadable.
int64_t StatusBytes(pid_t pid, absl::string_view field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (!absl::StartsWith(line, field)) continue;
    int64_t kb = 0;
    std::vector<std::string> parts = absl::StrSplit(line.substr(field.size()), absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (!parts.empty() && absl::SimpleAtoi(parts[0], &kb)) return kb * 1024;
  }
  return -1;
}

}  // namespace

std::unique_ptr<BackgroundProcess> BackgroundProcess::Start(const std::vector<std::string>& argv,
                                                            const std::vector<std::string>& env,
                                                            const std::string& output_path) {
  const int out = ::open(output_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (out < 0) {
    ADD_FAILURE() << "cannot open " << output_path;
    return nullptr;
  }
  std::vector<std::string> args = argv, vars = env;
  std::vector<char*> c_argv;
  for (std::string& a : args) c_argv.push_back(a.data());
  c_argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent) ::_exit(126);
    ::dup2(out, 1);
    ::dup2(out, 2);
    for (std::string& assignment : vars) ::putenv(assignment.data());
    ::execv(c_argv[0], c_argv.data());
    ::_exit(126);
  }
  ::close(out);
  if (pid < 0) {
    ADD_FAILURE() << "fork failed";
    return nullptr;
  }
  return std::unique_ptr<BackgroundProcess>(new BackgroundProcess(pid, output_path));
}

BackgroundProcess::~BackgroundProcess() {
  if (!exit_code_.has_value()) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
}

std::string BackgroundProcess::Output() const {
  std::ifstream in(output_path_);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void BackgroundProcess::Signal(int signal) {
  if (!exit_code_.has_value()) ::kill(pid_, signal);
}

std::optional<int> BackgroundProcess::Wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!exit_code_.has_value()) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exit_code_ = ExitCode(status);
      break;
    }
    if (absl::Now() >= deadline) break;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return exit_code_;
}

bool BecomeChildSubreaper() { return ::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0; }

std::vector<pid_t> ChildrenOf(pid_t pid) {
  std::vector<pid_t> children;
  const std::string tasks = absl::StrCat("/proc/", pid, "/task");
  DIR* dir = ::opendir(tasks.c_str());
  if (dir == nullptr) return children;
  while (dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    std::ifstream in(absl::StrCat(tasks, "/", entry->d_name, "/children"));
    pid_t child = 0;
    while (in >> child) children.push_back(child);
  }
  ::closedir(dir);
  return children;
}

bool ProcessEnded(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');
  if (stat.empty() || paren == std::string::npos || paren + 2 >= stat.size()) return true;
  const char state = stat[paren + 2];
  return state == 'Z' || state == 'X';
}

void KillAndReap(pid_t pid) {
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
}

int64_t PeakRssBytes(pid_t pid) { return StatusBytes(pid, "VmHWM:"); }
int64_t RssBytes(pid_t pid) { return StatusBytes(pid, "VmRSS:"); }

bool AcceptsConnections(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool connected = ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  ::close(fd);
  return connected;
}

int FreeTcpPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  int port = 0;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  if (fd >= 0) ::close(fd);
  EXPECT_GT(port, 0) << "no free port";
  return port;
}

}  // namespace ddp
