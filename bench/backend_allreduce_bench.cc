// backend_allreduce_bench: median time of one float32 sum all-reduce per message size through
// InitProcessGroup's backend (gloo, shm or auto), under ddprun:
//
//   ddprun --nproc_per_node=2 --master_port=0 bazel-bin/bench/backend_allreduce_bench --backend=shm
//
// Per size: --warmup untimed calls, then calls until --target_ms passed (at least --min_iters; every
// rank runs rank 0's count, agreed by a broadcast), each call timed alone; rank 0 prints the median.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "comm/init.h"
#include "tensor/factory.h"

ABSL_FLAG(std::string, backend, "shm", "auto, gloo or shm.");
ABSL_FLAG(std::vector<std::string>, bytes, std::vector<std::string>({"4", "65536", "1048576", "2097152",
                                                                     "4194304", "67108864"}),
          "Message sizes in bytes (multiples of 4).");
ABSL_FLAG(int, warmup, 3, "Untimed calls per size.");
ABSL_FLAG(int, min_iters, 10, "Fewest timed calls per size.");
ABSL_FLAG(double, target_ms, 300.0, "Time to spend per size (rank 0's estimate from the warm-up).");

namespace ddp {
namespace {

double TimeOne(ProcessGroup& group, const Tensor& t) {
  const auto start = std::chrono::steady_clock::now();
  DDP_CHECK(group.AllReduce(t)->Wait(absl::Seconds(120)).ok()) << "all-reduce failed";
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int Main() {
  InitOptions options;
  options.backend = absl::GetFlag(FLAGS_backend);
  auto context = InitProcessGroup(options);
  DDP_CHECK(context.ok()) << context.status();
  ProcessGroup& group = *(*context)->group;
  if (group.rank() == 0) std::printf("backend %s, world %d\n%12s %12s %8s\n", group.backend_name().c_str(), group.size(), "bytes", "median_us", "iters");
  for (const std::string& text : absl::GetFlag(FLAGS_bytes)) {
    const int64_t bytes = std::stoll(text);
    Tensor t = Ones({bytes / 4});
    double warm = 0;
    for (int i = 0; i < absl::GetFlag(FLAGS_warmup); ++i) warm = TimeOne(group, t);
    Tensor iters = FromVector(std::vector<float>{static_cast<float>(std::max<double>(
                                  absl::GetFlag(FLAGS_min_iters), absl::GetFlag(FLAGS_target_ms) / 1e3 / warm))},
                              {1});
    DDP_CHECK(group.Broadcast(iters, 0)->Wait(absl::Seconds(60)).ok());
    std::vector<double> seconds;
    for (int i = 0; i < static_cast<int>(iters.ToVector<float>()[0]); ++i) seconds.push_back(TimeOne(group, t));
    std::sort(seconds.begin(), seconds.end());
    if (group.rank() == 0) std::printf("%12lld %12.1f %8zu\n", static_cast<long long>(bytes), seconds[seconds.size() / 2] * 1e6, seconds.size());
  }
  return 0;
}

}  // namespace
}  // namespace ddp

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return ddp::Main();
}
