#include "launch/spawn.h"

#include <exception>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "tensor/check.h"

namespace ddp {
namespace {

absl::Status RunRank(int rank, const std::function<absl::Status(int rank)>& fn) {
  try {
    return fn(rank);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("uncaught exception: ", e.what()));
  } catch (...) {
    return absl::InternalError("uncaught exception of unknown type");
  }
}

}  // namespace

absl::Status Spawn(int n, const std::function<absl::Status(int rank)>& fn) {
  DDP_CHECK(n >= 1) << "Spawn needs at least one rank, got " << n;
  absl::Mutex mu;
  absl::Status first_error;  // Guarded by mu.
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
      absl::Status status = RunRank(rank, fn);
      if (status.ok()) return;
      absl::MutexLock lock(&mu);
      if (first_error.ok()) {
        first_error = absl::Status(status.code(), absl::StrCat("rank ", rank, ": ", status.message()));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return first_error;
}

}  // namespace ddp
