#include "launch/worker_group.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/unique_fd.h"
#include "launch/virtual_local_rank.h"
#include "launch/worker_exit.h"
#include "launch/worker_process.h"
#include "store/socket_util.h"

namespace ddp {
namespace {

struct Worker {
  int rank = 0;
  int local_rank = 0;
  int member = 0;  // elastic: the rank for a worker started with the group, a new id for a replacement
  std::unique_ptr<WorkerProcess> process;
  UniqueFd log;
  UniqueFd stdout_file, stderr_file;  // torchrun's redirected / tee'd streams.
  std::unique_ptr<RankOutput> output;
  bool exited = false;
};

// Drives one attempt: see RunWorkerGroup.
class GroupRunner {
 public:
  explicit GroupRunner(const WorkerGroupConfig& config) : config_(config) {}
  ~GroupRunner() { KillAll(SIGKILL); }  // Only matters when Start failed part way.

  absl::Status Start();
  GroupOutcome Run();

 private:
  absl::Status OpenStreamFiles(Worker& w);
  std::map<std::string, std::string> EnvironmentOf(int local_rank) const;
  void Pump(Worker& w);
  void PumpFd(Worker& w, int fd, RankOutput::Stream stream);
  void Reap(absl::Time now);
  void ForwardSignals(absl::Time now);
  void KillAll(int signal);
  void StopOthers(absl::Time now);
  bool AllExited() const;
  // How worker `w`, reaped with `wait_status`, ended (DescribeWorkerExit).
  std::string Describe(const Worker& w, int wait_status);
  // Elastic mode: records how worker `w` exited (`wait_status`) without stopping the others, and queues its
  // slot for a replacement when config_.replace_worker allows one.
  void NoteElasticExit(Worker& w, int wait_status);
  // Elastic mode: starts the queued replacements, each in its lost worker's slot.
  void StartReplacements();
  absl::Status StartProcess(Worker& w, const std::map<std::string, std::string>& extra);
  int Alive() const;

  const WorkerGroupConfig& config_;
  OomKillWatch oom_kills_;  // the kernel's OOM kill counts since the attempt started
  std::vector<Worker> workers_;
  GroupOutcome outcome_;
  absl::Time kill_at_ = absl::InfiniteFuture();  // SIGKILL whoever still runs at this time.
  bool any_succeeded_ = false;  // elastic: a worker exited 0
  GroupOutcome first_lost_;     // elastic: the first worker that failed (failed_rank -1: none)
  // elastic: slots (indices into workers_) to restart, with their replacements' extra variables.
  std::vector<std::pair<size_t, std::map<std::string, std::string>>> pending_replacements_;
};

UniqueFd OpenForAppend(const std::string& path) {
  return UniqueFd(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
}

// torchrun's --redirects / --tee / --local_ranks_filter for one worker.
absl::Status GroupRunner::OpenStreamFiles(Worker& w) {
  const StdStreams redirect = config_.redirects.For(w.local_rank);
  const StdStreams tee = config_.tee.For(w.local_rank);
  RankOutputRouting routing;
  const std::vector<int>& filter = config_.local_ranks_filter;
  const bool shown = filter.empty() || std::find(filter.begin(), filter.end(), w.local_rank) != filter.end();
  routing.stdout_console = shown && !redirect.out;
  routing.stderr_console = shown && !redirect.err;
  if (config_.log_tree != nullptr) {
    const int restart = config_.layout.restart_count;
    for (const bool err : {false, true}) {
      if (!(err ? redirect.err || tee.err : redirect.out || tee.out)) continue;
      const std::string path = config_.log_tree->WorkerFile(restart, w.local_rank, err ? "stderr.log" : "stdout.log");
      UniqueFd& fd = err ? w.stderr_file : w.stdout_file;
      fd = OpenForAppend(path);
      if (!fd.valid()) return absl::UnavailableError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
      (err ? routing.stderr_file : routing.stdout_file) = fd.get();
    }
  }
  w.output->SetRouting(routing);
  return absl::OkStatus();
}

std::map<std::string, std::string> GroupRunner::EnvironmentOf(int local_rank) const {
  std::map<std::string, std::string> env = WorkerEnvironment(config_.layout, local_rank);
  if (config_.virtual_local_rank) ApplyVirtualLocalRank(local_rank, ProcessEnv(), &env);
  if (config_.log_tree != nullptr) {
    env["TORCHELASTIC_ERROR_FILE"] =
        config_.log_tree->WorkerFile(config_.layout.restart_count, local_rank, "error.json");
  }
  return env;
}

absl::Status GroupRunner::Start() {
  const JobLayout& layout = config_.layout;
  for (int local = 0; local < layout.nproc_per_node; ++local) {
    Worker w;
    w.rank = layout.node_rank * layout.nproc_per_node + local;
    w.local_rank = local;
    if (!config_.log_dir.empty()) {
      const std::string path = absl::StrCat(config_.log_dir, "/rank_", w.rank, ".log");
      w.log.Reset(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
      if (!w.log.valid()) {
        return absl::UnavailableError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
      }
    }
    w.member = w.rank;
    DDP_RETURN_IF_ERROR(StartProcess(w, {}));
    workers_.push_back(std::move(w));
  }
  return absl::OkStatus();
}

// Starts worker `w`'s process (its slot's environment, config_.extra_env, then `extra`) with fresh output
// routing.
absl::Status GroupRunner::StartProcess(Worker& w, const std::map<std::string, std::string>& extra) {
  const JobLayout& layout = config_.layout;
  w.output = std::make_unique<RankOutput>(w.rank, config_.redirect, 1, 2, w.log.get());
  DDP_RETURN_IF_ERROR(OpenStreamFiles(w));
  DDP_RETURN_IF_ERROR(w.output->SetConsoleOptions(config_.console, {layout.role, w.rank, w.local_rank, HostName()},
      config_.log_tree == nullptr ? "" : config_.log_tree->AttemptDir(layout.restart_count)));
  std::map<std::string, std::string> env = EnvironmentOf(w.local_rank);
  for (const auto& [name, value] : config_.extra_env) env[name] = value;
  for (const auto& [name, value] : extra) env[name] = value;
  auto process = WorkerProcess::Start(config_.command, env);
  if (!process.ok()) return process.status();
  w.process = std::move(*process);
  w.exited = false;
  return absl::OkStatus();
}

int GroupRunner::Alive() const {
  int alive = 0;
  for (const Worker& w : workers_) alive += w.exited ? 0 : 1;
  return alive;
}

void GroupRunner::StartReplacements() {
  for (auto& [index, extra] : pending_replacements_) {
    Worker& w = workers_[index];
    const auto member = extra.find("DDP_ELASTIC_MEMBER");
    const absl::Status started = StartProcess(w, extra);
    if (!started.ok()) {
      std::fprintf(stderr, "ddprun: elastic: cannot start a replacement for rank %d: %s\n", w.rank,
                   std::string(started.message()).c_str());
      continue;
    }
    if (member != extra.end()) w.member = std::atoi(member->second.c_str());
    ++outcome_.replacements;
  }
  pending_replacements_.clear();
}

void GroupRunner::PumpFd(Worker& w, int fd, RankOutput::Stream stream) {
  char buffer[16 * 1024];
  for (int i = 0; i < 64; ++i) {  // Bounded, so one chatty worker cannot starve the others.
    ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n > 0) {
      w.output->Feed(stream, absl::string_view(buffer, static_cast<size_t>(n)));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    // EOF or error: this stream is done.
    if (stream == RankOutput::Stream::kStdout) w.process->CloseStdout();
    else w.process->CloseStderr();
    return;
  }
}

void GroupRunner::Pump(Worker& w) {
  if (w.process->stdout_fd() >= 0) PumpFd(w, w.process->stdout_fd(), RankOutput::Stream::kStdout);
  if (w.process->stderr_fd() >= 0) PumpFd(w, w.process->stderr_fd(), RankOutput::Stream::kStderr);
}

void GroupRunner::Reap(absl::Time now) {
  // Among the workers that exited non-zero in this poll cycle, blame one killed by a signal first: when a
  // crash cascades, survivors that exit in the same cycle are consequences, not the cause.
  Worker* culprit = nullptr;
  int culprit_status = 0;
  for (Worker& w : workers_) {
    if (w.exited) continue;
    std::optional<int> status = w.process->TryReap();
    if (!status.has_value()) continue;
    w.exited = true;
    // Everything the worker wrote is in the pipes now. Grandchildren may keep the pipes open, so
    // read what is there and stop listening rather than wait for EOF.
    Pump(w);
    w.process->CloseStdout();
    w.process->CloseStderr();
    w.output->Finish();
    const int code = ExitCodeFromWaitStatus(*status);
    const bool signaled = WIFSIGNALED(*status);
    if (config_.elastic) {
      NoteElasticExit(w, *status);
      continue;
    }
    if (code != 0 && (culprit == nullptr || (signaled && !WIFSIGNALED(culprit_status)))) {
      culprit = &w;
      culprit_status = *status;
    }
  }
  if (culprit != nullptr && outcome_.kind == GroupOutcome::Kind::kSucceeded) {
    outcome_.kind = GroupOutcome::Kind::kFailed;
    outcome_.failed_rank = culprit->rank;
    outcome_.exit_code = ExitCodeFromWaitStatus(culprit_status);
    outcome_.exit_description = Describe(*culprit, culprit_status);
    outcome_.tail = culprit->output->Tail();
    if (config_.log_tree != nullptr) {
      outcome_.error_file_message =
          ReadWorkerErrorFile(config_.log_tree->WorkerFile(config_.layout.restart_count, culprit->local_rank,
                                                           "error.json"))
              .value_or("");
    }
    if (config_.on_first_failure) config_.on_first_failure(culprit->rank, outcome_.exit_description);
    StopOthers(now);
  }
}

void GroupRunner::StopOthers(absl::Time now) {
  KillAll(SIGTERM);
  kill_at_ = std::min(kill_at_, now + config_.grace_period);
}

void GroupRunner::KillAll(int signal) {
  for (Worker& w : workers_) {
    if (!w.exited) w.process->Signal(signal);
  }
}

void GroupRunner::ForwardSignals(absl::Time now) {
  unsigned char signo = 0;
  while (::read(config_.signal_fd, &signo, 1) == 1) {
    if (outcome_.kind == GroupOutcome::Kind::kSucceeded) {
      outcome_.kind = GroupOutcome::Kind::kInterrupted;
      outcome_.signal = signo;
    }
    KillAll(signo);
    kill_at_ = std::min(kill_at_, now + config_.grace_period);
  }
}

std::string GroupRunner::Describe(const Worker& w, int wait_status) {
  WorkerExit exit;
  exit.exit_code = ExitCodeFromWaitStatus(wait_status);
  exit.signaled = WIFSIGNALED(wait_status);
  exit.peak_rss_bytes = w.process->peak_rss_bytes();
  if (exit.signaled && WTERMSIG(wait_status) == SIGKILL) exit.sigkill_cause = oom_kills_.ExplainSigkill();
  return DescribeWorkerExit(exit);
}

void GroupRunner::NoteElasticExit(Worker& w, int wait_status) {
  const int code = ExitCodeFromWaitStatus(wait_status);
  if (code == 0) {
    any_succeeded_ = true;
    if (config_.on_worker_finished) config_.on_worker_finished();
    return;
  }
  outcome_.lost_ranks.push_back(w.member);
  const std::string how = Describe(w, wait_status);
  if (first_lost_.failed_rank < 0) {
    first_lost_.failed_rank = w.rank;
    first_lost_.exit_code = code;
    first_lost_.exit_description = how;
    first_lost_.tail = w.output->Tail();
  }
  if (config_.on_worker_lost) config_.on_worker_lost(w.rank, w.member, how);
  const int queued = outcome_.replacements + static_cast<int>(pending_replacements_.size());
  if (!config_.replace_worker || any_succeeded_ || queued >= config_.max_replacements ||
      outcome_.kind != GroupOutcome::Kind::kSucceeded) {  // kInterrupted: ddprun is stopping the job
    return;
  }
  std::optional<std::map<std::string, std::string>> extra = config_.replace_worker(w.rank, Alive());
  if (extra.has_value()) pending_replacements_.emplace_back(static_cast<size_t>(&w - workers_.data()), *std::move(extra));
}

bool GroupRunner::AllExited() const {
  for (const Worker& w : workers_) {
    if (!w.exited) return false;
  }
  return true;
}

GroupOutcome GroupRunner::Run() {
  while (!AllExited()) {
    std::vector<pollfd> fds;
    if (config_.signal_fd >= 0) fds.push_back({config_.signal_fd, POLLIN, 0});
    for (const Worker& w : workers_) {
      if (w.process->stdout_fd() >= 0) fds.push_back({w.process->stdout_fd(), POLLIN, 0});
      if (w.process->stderr_fd() >= 0) fds.push_back({w.process->stderr_fd(), POLLIN, 0});
    }
    // Wake at least every monitor interval to reap exited workers (no SIGCHLD plumbing needed); a
    // worker that exits closes its pipes, which wakes the poll at once.
    const int monitor_ms = std::max<int>(1, static_cast<int>(absl::ToInt64Milliseconds(config_.monitor_interval)));
    const int timeout = std::min(monitor_ms, PollTimeoutMs(kill_at_) < 0 ? monitor_ms : PollTimeoutMs(kill_at_));
    ::poll(fds.data(), fds.size(), timeout);
    const absl::Time now = absl::Now();
    if (config_.signal_fd >= 0) ForwardSignals(now);
    for (Worker& w : workers_) {
      if (!w.exited) Pump(w);
    }
    Reap(now);
    StartReplacements();
    if (now >= kill_at_) {
      KillAll(SIGKILL);
      kill_at_ = absl::InfiniteFuture();
    }
  }
  // Elastic: the job finished when a survivor did; when none did, it failed as its first lost worker.
  if (config_.elastic && outcome_.kind == GroupOutcome::Kind::kSucceeded && !any_succeeded_ &&
      first_lost_.failed_rank >= 0) {
    outcome_.kind = GroupOutcome::Kind::kFailed;
    outcome_.failed_rank = first_lost_.failed_rank;
    outcome_.exit_code = first_lost_.exit_code;
    outcome_.exit_description = first_lost_.exit_description;
    outcome_.tail = first_lost_.tail;
  }
  return outcome_;
}

}  // namespace

absl::StatusOr<GroupOutcome> RunWorkerGroup(const WorkerGroupConfig& config) {
  DDP_CHECK(!config.command.empty()) << "no command";
  GroupRunner runner(config);
  absl::Status started = runner.Start();
  if (!started.ok()) return started;  // ~GroupRunner kills those already started.
  return runner.Run();
}

}  // namespace ddp
