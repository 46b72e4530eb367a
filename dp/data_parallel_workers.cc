#include "dp/data_parallel_workers.h"

#include <optional>

#include "base/check.h"
#include "tensor/autocast.h"
#include "tensor/autograd.h"
#include "tensor/threads.h"

namespace ddp {

DeviceWorkers::DeviceWorkers(const DeviceWorkersOptions& options) {
  DDP_CHECK(options.num_workers >= 1) << "DeviceWorkers: num_workers must be >= 1, got " << options.num_workers;
  DDP_CHECK(options.kernel_threads >= 1) << "DeviceWorkers: kernel_threads must be >= 1, got "
                                         << options.kernel_threads;
  {
    absl::MutexLock lock(&mu_);
    tasks_.resize(options.num_workers);
  }
  const int kernel_threads = options.kernel_threads;
  for (int i = 0; i < options.num_workers; ++i) {
    threads_.emplace_back([this, i, kernel_threads] { WorkerLoop(i, kernel_threads); });
  }
}

DeviceWorkers::~DeviceWorkers() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& thread : threads_) thread.join();
}

void DeviceWorkers::Run(const std::vector<std::function<void()>>& tasks) {
  DDP_CHECK(tasks.size() <= threads_.size())
      << "DeviceWorkers: " << tasks.size() << " tasks for " << threads_.size() << " workers";
  const bool grad_mode = GradModeEnabled();
  const AutocastSettings autocast = CurrentAutocastSettings();
  absl::MutexLock lock(&mu_);
  DDP_CHECK(pending_ == 0) << "DeviceWorkers::Run called while another Run is in flight";
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (!tasks[i]) continue;
    tasks_[i] = [grad_mode, autocast, task = tasks[i]] {
      // A worker is outside any autocast scope and in grad mode between tasks (only scoped guards ever
      // change either), so entering the caller's state is all it takes.
      std::optional<AutocastScope> autocast_scope;
      if (autocast.enabled) autocast_scope.emplace(true, autocast.dtype);
      std::optional<NoGradGuard> no_grad;
      if (!grad_mode) no_grad.emplace();
      task();
    };
    ++pending_;
  }
  auto all_done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return pending_ == 0; };
  mu_.Await(absl::Condition(&all_done));
}

void DeviceWorkers::WorkerLoop(int index, int kernel_threads) {
  // The OpenMP thread count is a per-thread setting (libgomp gives each thread that calls
  // omp_set_num_threads its own nthreads ICV; threads that never did read the process default, every
  // core), so each worker sets its own: N workers using all cores each would oversubscribe the machine.
  SetNumThreads(kernel_threads);
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      auto has_work = [this, index]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || tasks_[index] != nullptr;
      };
      mu_.Await(absl::Condition(&has_work));
      if (tasks_[index] == nullptr) return;  // stopping, nothing left to run
      task = std::move(tasks_[index]);
      tasks_[index] = nullptr;
    }
    task();
    absl::MutexLock lock(&mu_);
    --pending_;
  }
}

}  // namespace ddp
