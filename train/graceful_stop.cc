#include "train/graceful_stop.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <thread>

namespace ddp {
namespace {

std::atomic<bool> stop_requested{false};

void WaitForSigterm(sigset_t set) {
  while (true) {
    int signal = 0;
    if (sigwait(&set, &signal) != 0 || signal != SIGTERM) continue;
    if (stop_requested.exchange(true)) {
      static const char kMessage[] = "train: second SIGTERM, exiting now\n";
      (void)!::write(2, kMessage, sizeof(kMessage) - 1);
      _exit(128 + SIGTERM);
    }
    std::fprintf(stderr, "train: SIGTERM received, stopping after the current step\n");
    std::fflush(stderr);
  }
}

}  // namespace

void InstallGracefulStop() {
  static std::once_flag once;
  std::call_once(once, [] {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    std::thread(WaitForSigterm, set).detach();
  });
}

bool GracefulStopRequested() { return stop_requested.load(std::memory_order_relaxed); }

}  // namespace ddp
