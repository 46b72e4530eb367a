#include "launch/job_control.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "store/prefix_store.h"
#include "store/store_keys.h"
#include "store/tcp_store_client.h"
#include "base/check.h"

namespace ddp {
namespace {

int g_signal_pipe_write = -1;  // Written by the signal handler only.

void OnSignal(int signo) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(signo);
  (void)!::write(g_signal_pipe_write, &byte, 1);
  errno = saved;
}

}  // namespace

ScopedSignalPipe::ScopedSignalPipe(std::vector<int> signals) : signals_(std::move(signals)) {
  DDP_CHECK(g_signal_pipe_write == -1) << "two ScopedSignalPipes at once";
  int fds[2];
  DDP_CHECK(::pipe2(fds, O_CLOEXEC | O_NONBLOCK) == 0) << "pipe: " << std::strerror(errno);
  read_.Reset(fds[0]);
  write_.Reset(fds[1]);
  g_signal_pipe_write = write_.get();
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  old_actions_.resize(signals_.size());
  for (size_t i = 0; i < signals_.size(); ++i) ::sigaction(signals_[i], &action, &old_actions_[i]);
  struct sigaction ignore = {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, &old_pipe_);
}

ScopedSignalPipe::~ScopedSignalPipe() {
  for (size_t i = 0; i < signals_.size(); ++i) ::sigaction(signals_[i], &old_actions_[i], nullptr);
  ::sigaction(SIGPIPE, &old_pipe_, nullptr);
  g_signal_pipe_write = -1;
}

absl::StatusOr<std::unique_ptr<TcpStoreClient>> ConnectJobStore(const JobLayout& layout,
                                                                absl::Duration connect_timeout,
                                                                absl::Duration io_timeout) {
  TcpStoreClientOptions options;
  options.host = layout.store_addr.empty() ? layout.master_addr : layout.store_addr;
  options.port = layout.store_port;
  options.job_token = layout.job_token;
  options.connect_timeout = connect_timeout;
  options.io_timeout = io_timeout;
  return TcpStoreClient::Create(options);
}

void RecordExitNotice(const JobLayout& layout, int restart, int rank, const std::string& how) {
  absl::StatusOr<std::unique_ptr<TcpStoreClient>> client = ConnectJobStore(layout);
  if (!client.ok()) return;
  PrefixStore group_store(DefaultGroupStorePrefix(absl::StrCat(restart)), client->get());
  (void)group_store.Set(LauncherExitNoticeKey(rank), how);
}

}  // namespace ddp
