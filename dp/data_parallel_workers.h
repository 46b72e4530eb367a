// The threads that stand for DataParallel's devices (dp/data_parallel.h): one long-lived worker per
// device, so each keeps its kernel thread count and its kernels' thread-local scratch across steps.
#ifndef DDP_DP_DATA_PARALLEL_WORKERS_H_
#define DDP_DP_DATA_PARALLEL_WORKERS_H_

#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ddp {

struct DeviceWorkersOptions {
  int num_workers = 1;     // threads, one per device; REQUIRES >= 1
  int kernel_threads = 1;  // OpenMP kernel threads each worker uses (SetNumThreads on that thread); >= 1
};

// A fixed set of worker threads; Run(tasks) runs tasks[i] on worker i and returns when all finished.
// Each task runs with the grad mode and the autocast state of the thread that called Run (both are
// thread-local: tensor/autograd.h, tensor/autocast.h), so a forward under NoGradGuard records no graph on
// the workers either, and one inside an AutocastScope runs its replicas' GEMMs in that scope's dtype.
// Thread safety: Run may be called from one thread at a time (DataParallel's caller); the destructor
// joins the workers and must not run concurrently with Run. A task that fails a DDP_CHECK aborts the
// process, as it would on the caller's thread.
class DeviceWorkers {
 public:
  explicit DeviceWorkers(const DeviceWorkersOptions& options);
  ~DeviceWorkers();
  DeviceWorkers(const DeviceWorkers&) = delete;
  DeviceWorkers& operator=(const DeviceWorkers&) = delete;

  // Runs tasks[i] on worker i, in parallel, and waits for all of them. Empty entries are skipped.
  // REQUIRES: tasks.size() <= size(); not called from inside a task of the same DeviceWorkers.
  void Run(const std::vector<std::function<void()>>& tasks);

  int size() const { return static_cast<int>(threads_.size()); }

 private:
  void WorkerLoop(int index, int kernel_threads);

  absl::Mutex mu_;
  std::vector<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);  // tasks_[i]: worker i's next task
  int pending_ ABSL_GUARDED_BY(mu_) = 0;                             // tasks of the current Run not done
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace ddp

#endif  // DDP_DP_DATA_PARALLEL_WORKERS_H_
