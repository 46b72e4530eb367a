// Conversions between dtypes (CopyInPlace, ToDType) run on the calling thread alone: DDP's communication
// threads widen bf16 and fp16 buckets through them, and an OpenMP region on such a thread would start a
// team of its own (sized by the process defaults, not by --threads) beside the ranks' compute. Threads are
// counted in /proc/self/task while the calling thread is alive (libgomp keeps a team's threads until its
// master thread exits); OMP_NUM_THREADS=3 (BUILD) gives a new thread's regions a team on any machine, which
// the control case shows.
#include <dirent.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <thread>
#include <utility>

#include "tensor/bf16_convert.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "tensor/random.h"

namespace ddp {
namespace {

int ThreadsInProcess() {
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return -1;
  int count = 0;
  while (const dirent* entry = readdir(dir)) count += entry->d_name[0] != '.';
  closedir(dir);
  return count;
}

// The thread count once it has stopped changing for 5 ms (a joined thread can still be listed while it
// exits), or after a second.
int SettledThreadCount() {
  int last = ThreadsInProcess();
  for (int i = 0; i < 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const int now = ThreadsInProcess();
    if (now == last) return now;
    last = now;
  }
  return last;
}

// Threads in the process before and after `body` runs on a new thread (counted on that thread).
std::pair<int, int> ThreadsAround(const std::function<void()>& body) {
  std::pair<int, int> counts;
  std::thread worker([&] {
    counts.first = SettledThreadCount();
    body();
    counts.second = ThreadsInProcess();
  });
  worker.join();
  return counts;
}

TEST(ConvertThreadsTest, DTypeConversionsStartNoThreadsOnACommunicationThread) {
  Generator gen(3);
  const int64_t n = int64_t{1} << 22;  // far above the array kernels' parallel threshold
  const Tensor x = Uniform({n}, -1.0f, 1.0f, gen);
  for (DType low : {DType::kBFloat16, DType::kFloat16}) {
    const auto counts = ThreadsAround([&] {
      const Tensor rounded = ToDType(x, low);
      const Tensor back = ToDType(rounded, DType::kFloat32);
      CopyInPlace(rounded, back);
    });
    EXPECT_LE(counts.second, counts.first) << DTypeName(low) << ": a conversion started threads";
  }
  // Control (last: its team's threads end with its thread): the parallel array kernel does start a team
  // on a thread of its own, so the count can see one.
  Tensor scratch = Tensor::Empty({n}, DType::kBFloat16);
  const auto control = ThreadsAround(
      [&] { cpu::FloatToBFloat16Array(x.data<float>(), static_cast<BFloat16*>(scratch.raw_data()), n); });
  EXPECT_GT(control.second, control.first) << "no OpenMP team seen: OMP_NUM_THREADS unset?";
}

}  // namespace
}  // namespace ddp
