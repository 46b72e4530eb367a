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
std::atomic<bool> polled{false};  // The step loop has asked at least once.

// Async-signal-safe enough for the waiting thread: one write(2), then _exit.
[[noreturn]] void ExitNow(const char* message, size_t size) {
  (void)!::write(2, message, size);
  _exit(128 + SIGTERM);
}

void WaitForSigterm(sigset_t set) {
  while (true) {
    int signal = 0;
    if (sigwait(&set, &signal) != 0 || signal != SIGTERM) continue;
    if (!polled.load()) {
      static const char kMessage[] =
          "train: SIGTERM before training started (start-up or rendezvous), exiting now\n";
      ExitNow(kMessage, sizeof(kMessage) - 1);
    }
    if (stop_requested.exchange(true)) {
      static const char kMessage[] = "train: second SIGTERM, exiting now\n";
      ExitNow(kMessage, sizeof(kMessage) - 1);
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

bool GracefulStopRequested() {
  polled.store(true);
  return stop_requested.load();
}

}  // namespace ddp
