// allreduce_bench: nccl-tests-style all-reduce table (float32 sum) for ProcessGroupGloo and for raw Gloo,
// measured in the same run, to show what our ProcessGroup adds over the library it wraps.
//
//   bazel run //bench:allreduce                                  # world 2,3,4; 4 B .. 64 MiB
//   bazel run //bench:allreduce -- --max_bytes=268435456          # up to 256 MiB (about 2x longer)
//   bazel run //bench:allreduce -- --world_sizes=2 --format=json  # one JSON object per row
//   bazel run //bench:allreduce -- --world_sizes=2 --debug_detail # "ours" under DDP_DEBUG=detail
//   bazel run //bench:allreduce -- --world_sizes=2 --min_bytes=1048576 --reduce_scatter
//                                                  # adds a reduce-scatter row ("rs") beside "ours"
//
// For each world size the binary forks that many rank processes (ranks as processes, as in a real job),
// which rendezvous through a FileStore in $TMPDIR and build two Gloo contexts over loopback TCP with the
// same options (device hostname 127.0.0.1, same timeout): one inside ProcessGroupGloo, measured as
// `AllReduce(t)->Wait()` ("ours": hand-off to the group's worker thread, completion, wake-up), and one
// used directly with `gloo::allreduce` on the calling thread ("raw", reduce function gloo::sum<float>).
//
// Method, per message size: 2 warm-up calls per impl; rank 0 picks the iteration count from the warm-up
// (about --target_ms per impl, at least --min_iters) and broadcasts it; then the two impls' calls are
// interleaved ABBA (ours, raw, raw, ours, ...) and each call is timed on its own. The reported time is
// the median per call (robust to the preemptions of a shared 2-core machine, which a mean is not),
// taken as the maximum over ranks.
//
// On a shared machine (other processes busy on the cores) a woken thread often waits for the next
// scheduler tick (4 ms here), which swamps microsecond differences; run with real-time priority there:
//   sudo chrt -f 5 bazel-bin/bench/allreduce        # default sizes take ~15-30 s on 2 cores
// --world_sizes=1 isolates our fixed cost: no communication happens, so "ours" is the pure round trip
// through the group's worker thread (issue, wake-up, completion, wake-up of the waiter).
// algbw = bytes / time; busbw = algbw * 2(n-1)/n (nccl-tests' all-reduce bus bandwidth). Rank 0 prints.
// With --reduce_scatter, each size also times ProcessGroupGloo::ReduceScatter of the same `bytes` per rank
// (n chunks of bytes/4/n floats: the ring of Note [Ring reduce-scatter] in
// comm/process_group_gloo_collectives.cc), after the ABBA loop, and prints it as an "rs" row whose ratio
// column is rs/ours (reduce-scatter time over all-reduce time of the same buffer); its busbw is
// algbw * (n-1)/n, as nccl-tests reports reduce-scatter.
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "comm/file_store.h"
#include "comm/gloo_store_adapter.h"
#include "comm/prefix_store.h"
#include "comm/process_group_debug.h"
#include "comm/process_group_gloo.h"
#include "tensor/factory.h"
#include "tensor/tensor.h"

ABSL_FLAG(std::string, world_sizes, "2,3,4", "Comma-separated world sizes (processes on this host).");
ABSL_FLAG(int64_t, min_bytes, 4, "Smallest message in bytes (a multiple of 4).");
ABSL_FLAG(int64_t, max_bytes, int64_t{64} << 20,
          "Largest message in bytes; sizes double from --min_bytes. 268435456 for nccl-tests' 256 MiB.");
ABSL_FLAG(std::string, format, "table", "table (human-readable) or json (one object per row).");
ABSL_FLAG(double, target_ms, 50.0, "Aim for this much time per impl and size.");
ABSL_FLAG(int, min_iters, 10, "Fewest timed calls per impl and size.");
ABSL_FLAG(int, warmup, 2, "Untimed calls per impl and size.");
ABSL_FLAG(bool, verbose, false, "Rank 0 also prints its own p10/p50/p90 per call and impl on stderr.");
ABSL_FLAG(bool, debug_detail, false,
          "\"ours\" runs under DDP_DEBUG=detail (ProcessGroupDebug: the ranks compare each call first), so "
          "the difference against a run without the flag is that mode's cost per collective.");
ABSL_FLAG(bool, reduce_scatter, false,
          "Also time ProcessGroupGloo::ReduceScatter of each size (one row \"rs\" beside \"ours\").");
ABSL_FLAG(double, timeout_s, 120.0, "Gloo timeout of both contexts, and the rendezvous timeout.");

namespace ddp {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchOptions {
  int64_t min_bytes = 4;                // smallest message
  int64_t max_bytes = int64_t{64} << 20;  // largest message
  bool json = false;                    // JSON rows instead of the table
  double target_ms = 50.0;              // timed calls per impl and size last about this long
  int min_iters = 10;                   // fewest timed calls per impl and size
  int warmup = 2;                       // untimed calls per impl and size
  absl::Duration timeout = absl::Seconds(120);  // Gloo and rendezvous timeout
  bool debug_detail = false;            // "ours" through ProcessGroupDebug (DDP_DEBUG=detail)
  bool reduce_scatter = false;          // also time ProcessGroupGloo::ReduceScatter per size
};

// The two all-reduce implementations of one rank, over two independent Gloo contexts.
class Ranks {
 public:
  // `store` and `group_store` (the group's rendezvous store, kept for failure reports) outlive `group`.
  // With `debug_detail`, "ours" goes through a ProcessGroupDebug over the group (DDP_DEBUG=detail).
  Ranks(std::unique_ptr<FileStore> store, std::unique_ptr<PrefixStore> group_store,
        std::unique_ptr<ProcessGroupGloo> group, std::shared_ptr<gloo::Context> raw, absl::Duration timeout,
        bool debug_detail)
      : store_(std::move(store)),
        group_store_(std::move(group_store)),
        group_(std::move(group)),
        debug_(debug_detail ? std::make_unique<ProcessGroupDebug>(group_.get()) : nullptr),
        raw_(std::move(raw)),
        timeout_(timeout) {}

  int rank() const { return group_->rank(); }
  int size() const { return group_->size(); }

  // One all-reduce (sum) through ProcessGroupGloo. Aborts on failure (a benchmark has no recovery).
  void Ours(const Tensor& t) {
    ProcessGroup& group = debug_ != nullptr ? static_cast<ProcessGroup&>(*debug_) : *group_;
    absl::Status status = group.AllReduce(t)->Wait(timeout_);
    if (!status.ok()) {
      std::fprintf(stderr, "allreduce_bench rank %d: %s\n", rank(), std::string(status.message()).c_str());
      std::_Exit(3);
    }
  }

  // One reduce-scatter (sum) through ProcessGroupGloo. Aborts on failure.
  void OursReduceScatter(const Tensor& output, const std::vector<Tensor>& inputs) {
    absl::Status status = group_->ReduceScatter(output, inputs)->Wait(timeout_);
    if (!status.ok()) {
      std::fprintf(stderr, "allreduce_bench rank %d: %s\n", rank(), std::string(status.message()).c_str());
      std::_Exit(3);
    }
  }

  // One all-reduce (sum) with gloo::allreduce on this thread.
  void Raw(float* data, size_t count) {
    if (count == 0) return;
    gloo::AllreduceOptions options(raw_);
    options.setOutput<float>(data, count);
    options.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    options.setTag(++raw_tag_);  // Fresh tags, as ProcessGroupGloo uses (control traffic uses tag 0).
    options.setTimeout(ToChrono(timeout_));
    gloo::allreduce(options);
  }

  // Control traffic on the raw context (never timed).
  void Barrier() {
    gloo::BarrierOptions options(raw_);
    options.setTimeout(ToChrono(timeout_));
    gloo::barrier(options);
  }
  int64_t BroadcastFromZero(int64_t value) {
    gloo::BroadcastOptions options(raw_);
    options.setOutput<int64_t>(&value, 1);
    options.setRoot(0);
    options.setTimeout(ToChrono(timeout_));
    gloo::broadcast(options);
    return value;
  }
  double MaxOverRanks(double value) {
    gloo::AllreduceOptions options(raw_);
    options.setOutput<double>(&value, 1);
    options.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::max<double>));
    options.setTimeout(ToChrono(timeout_));
    gloo::allreduce(options);
    return value;
  }

 private:
  static std::chrono::milliseconds ToChrono(absl::Duration d) {
    return std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
  }

  std::unique_ptr<FileStore> store_;
  std::unique_ptr<PrefixStore> group_store_;
  std::unique_ptr<ProcessGroupGloo> group_;
  std::unique_ptr<ProcessGroupDebug> debug_;  // null unless --debug_detail
  std::shared_ptr<gloo::Context> raw_;
  const absl::Duration timeout_;
  uint32_t raw_tag_ = 0;  // Tag of the last measured raw all-reduce.
};

enum class Impl { kOurs, kRaw };
const char* ImplName(Impl impl) { return impl == Impl::kOurs ? "ours" : "raw"; }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t mid = v.size() / 2;
  return v.size() % 2 == 1 ? v[mid] : 0.5 * (v[mid - 1] + v[mid]);
}

struct Row {
  int64_t bytes;
  double ours_s;  // median seconds per call, maximum over ranks
  double raw_s;
  double reduce_scatter_s = 0.0;  // with --reduce_scatter: median seconds per reduce-scatter, max over ranks
};

// Median seconds per ProcessGroupGloo::ReduceScatter (sum) of `bytes` per rank, after `warmup` calls.
double MeasureReduceScatter(Ranks& ranks, int64_t bytes, int iters, const BenchOptions& options) {
  const int64_t chunk = bytes / 4 / ranks.size();
  std::vector<Tensor> inputs;
  for (int r = 0; r < ranks.size(); ++r) inputs.push_back(Zeros({chunk}));
  Tensor output = Zeros({chunk});
  for (int i = 0; i < options.warmup; ++i) ranks.OursReduceScatter(output, inputs);
  std::vector<double> seconds;
  ranks.Barrier();
  for (int i = 0; i < iters; ++i) {
    const Clock::time_point start = Clock::now();
    ranks.OursReduceScatter(output, inputs);
    seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  return ranks.MaxOverRanks(Median(seconds));
}

// Both impls at one size: warm-up, an iteration count agreed from rank 0's warm-up, then `iters` timed
// calls of each impl interleaved ABBA (ours, raw, raw, ours, ...), so load on the machine hits both alike.
Row MeasureSize(Ranks& ranks, int64_t bytes, const BenchOptions& options) {
  Tensor t = Zeros({bytes / 4});  // Zeros stay zeros under sum: no overflow, no denormals.
  const Clock::time_point warm_start = Clock::now();
  for (int i = 0; i < options.warmup; ++i) ranks.Ours(t);
  for (int i = 0; i < options.warmup; ++i) ranks.Raw(t.data<float>(), t.numel());
  const double per_call = std::chrono::duration<double>(Clock::now() - warm_start).count() /
                          std::max(1, 2 * options.warmup);
  const int64_t wanted = static_cast<int64_t>(options.target_ms * 1e-3 / std::max(per_call, 1e-7));
  const int iters = static_cast<int>(
      ranks.BroadcastFromZero(std::clamp<int64_t>(wanted, options.min_iters, 100000)));
  std::vector<double> seconds[2];
  ranks.Barrier();
  for (int i = 0; i < 2 * iters; ++i) {
    const Impl impl = (i + i / 2) % 2 == 0 ? Impl::kOurs : Impl::kRaw;
    const Clock::time_point start = Clock::now();
    if (impl == Impl::kOurs) {
      ranks.Ours(t);
    } else {
      ranks.Raw(t.data<float>(), t.numel());
    }
    seconds[static_cast<int>(impl)].push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  if (ranks.rank() == 0 && absl::GetFlag(FLAGS_verbose)) {
    for (Impl impl : {Impl::kOurs, Impl::kRaw}) {
      std::vector<double> v = seconds[static_cast<int>(impl)];
      std::sort(v.begin(), v.end());
      std::fprintf(stderr, "# %lld B %s rank 0: %zu calls, p10 %.1f us, p50 %.1f us, p90 %.1f us\n",
                   static_cast<long long>(bytes), ImplName(impl), v.size(), v[v.size() / 10] * 1e6,
                   v[v.size() / 2] * 1e6, v[v.size() * 9 / 10] * 1e6);
    }
  }
  Row row{bytes, ranks.MaxOverRanks(Median(seconds[0])), ranks.MaxOverRanks(Median(seconds[1]))};
  if (options.reduce_scatter) row.reduce_scatter_s = MeasureReduceScatter(ranks, bytes, iters, options);
  return row;
}

void PrintRow(const Row& row, int world, bool json) {
  const double ratio = row.ours_s / row.raw_s;
  for (Impl impl : {Impl::kOurs, Impl::kRaw}) {
    const double s = impl == Impl::kOurs ? row.ours_s : row.raw_s;
    const double algbw = row.bytes / s / 1e9;
    const double busbw = algbw * 2.0 * (world - 1) / world;
    if (json) {
      std::printf(
          "{\"bytes\": %lld, \"time_us\": %.2f, \"algbw_gbps\": %.4f, \"busbw_gbps\": %.4f, \"impl\": \"%s\", "
          "\"world_size\": %d, \"ours_over_raw\": %.4f}\n",
          static_cast<long long>(row.bytes), s * 1e6, algbw, busbw, ImplName(impl), world, ratio);
    } else {
      std::printf("%12lld %12.2f %11.4f %11.4f %6s", static_cast<long long>(row.bytes), s * 1e6, algbw, busbw,
                  ImplName(impl));
      if (impl == Impl::kOurs) {
        std::printf(" %9.3f %+10.2f\n", ratio, (row.ours_s - row.raw_s) * 1e6);
      } else {
        std::printf("\n");
      }
    }
  }
  if (row.reduce_scatter_s > 0.0) {
    const double algbw = row.bytes / row.reduce_scatter_s / 1e9;
    const double busbw = algbw * (world - 1) / world;
    const double over_allreduce = row.reduce_scatter_s / row.ours_s;
    if (json) {
      std::printf(
          "{\"bytes\": %lld, \"time_us\": %.2f, \"algbw_gbps\": %.4f, \"busbw_gbps\": %.4f, \"impl\": "
          "\"reduce_scatter\", \"world_size\": %d, \"rs_over_allreduce\": %.4f}\n",
          static_cast<long long>(row.bytes), row.reduce_scatter_s * 1e6, algbw, busbw, world, over_allreduce);
    } else {
      std::printf("%12lld %12.2f %11.4f %11.4f %6s %9.3f %+10.2f\n", static_cast<long long>(row.bytes),
                  row.reduce_scatter_s * 1e6, algbw, busbw, "rs", over_allreduce,
                  (row.reduce_scatter_s - row.ours_s) * 1e6);
    }
  }
  std::fflush(stdout);
}

// Rank 0's summary against the targets: <= 5% over raw at >= 1 MiB, <= 50 us extra at 4 B.
// Single large sizes are noisy on a shared machine (few calls each), so the median ratio over all sizes
// >= 1 MiB is the verdict; the worst one is printed next to it.
void PrintSummary(const std::vector<Row>& rows, int world) {
  std::vector<double> large_ratios;
  double worst = 0.0;
  int64_t worst_bytes = 0;
  for (const Row& row : rows) {
    if (row.bytes < (int64_t{1} << 20)) continue;
    const double ratio = row.ours_s / row.raw_s;
    large_ratios.push_back(ratio);
    if (ratio > worst) {
      worst = ratio;
      worst_bytes = row.bytes;
    }
  }
  std::printf("# world %d summary:", world);
  if (!large_ratios.empty()) {
    const double median = Median(large_ratios);
    std::printf(" median ours/raw at >= 1 MiB: %.3f (target <= 1.05: %s; worst %.3f at %lld B);", median,
                median <= 1.05 ? "met" : "MISSED", worst, static_cast<long long>(worst_bytes));
  }
  if (!rows.empty() && rows.front().bytes == 4) {
    const double extra_us = (rows.front().ours_s - rows.front().raw_s) * 1e6;
    std::printf(" extra at 4 B: %+.1f us (target <= 50 us: %s)", extra_us, extra_us <= 50.0 ? "met" : "MISSED");
  }
  std::printf("\n\n");
  std::fflush(stdout);
}

// Joins both contexts through the FileStore at `store_path`.
std::unique_ptr<Ranks> Join(const std::string& store_path, int rank, int world, absl::Duration timeout,
                            bool debug_detail) {
  absl::StatusOr<std::unique_ptr<FileStore>> store = FileStore::Create(store_path);
  if (!store.ok()) {
    std::fprintf(stderr, "allreduce_bench: %s\n", std::string(store.status().message()).c_str());
    std::_Exit(2);
  }
  auto group_store = std::make_unique<PrefixStore>("pg/", store->get());
  ProcessGroupGlooOptions group_options;
  group_options.timeout = timeout;
  group_options.hostname = "127.0.0.1";
  absl::StatusOr<std::unique_ptr<ProcessGroupGloo>> group =
      ProcessGroupGloo::Create(*group_store, rank, world, group_options);
  if (!group.ok()) {
    std::fprintf(stderr, "allreduce_bench: %s\n", std::string(group.status().message()).c_str());
    std::_Exit(2);
  }
  PrefixStore raw_store("raw/", store->get());
  GlooStoreAdapter adapter(&raw_store, timeout);
  gloo::transport::tcp::attr attr;
  attr.hostname = group_options.hostname;
  auto raw = std::make_shared<gloo::rendezvous::Context>(rank, world);
  raw->setTimeout(std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout)));
  std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
  raw->connectFullMesh(adapter, device);  // throws on failure
  return std::make_unique<Ranks>(*std::move(store), std::move(group_store), std::move(*group), std::move(raw),
                                 timeout, debug_detail);
}

// The body of one rank process.
int RunRank(const std::string& store_path, int rank, int world, const BenchOptions& options) {
  std::unique_ptr<Ranks> ranks = Join(store_path, rank, world, options.timeout, options.debug_detail);
  if (rank == 0 && !options.json) {
    std::printf("# all-reduce, float32 sum, world size %d (processes over loopback TCP), median per call\n",
                world);
    std::printf("%12s %12s %11s %11s %6s %9s %10s\n", "bytes", "time_us", "algbw_gbps", "busbw_gbps", "impl",
                "ours/raw", "extra_us");
    if (options.reduce_scatter) {
      std::printf("# rs: ReduceScatter (sum) of the same bytes per rank; its ratio and extra columns are "
                  "against \"ours\" (the all-reduce)\n");
    }
    std::fflush(stdout);
  }
  std::vector<Row> rows;
  for (int64_t bytes = options.min_bytes; bytes <= options.max_bytes; bytes *= 2) {
    rows.push_back(MeasureSize(*ranks, bytes, options));
    if (rank == 0) PrintRow(rows.back(), world, options.json);
  }
  if (rank == 0 && !options.json) PrintSummary(rows, world);
  ranks->Barrier();
  return 0;
}

// Forks `world` rank processes and waits for them (bounded). Returns true when all exited 0.
bool RunWorld(int world, const BenchOptions& options) {
  const char* tmp = std::getenv("TMPDIR");
  const std::string store_path =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/ddp_allreduce_bench_", ::getpid(), "_w", world, ".store");
  ::unlink(store_path.c_str());
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; ++rank) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      int code = 1;
      try {
        code = RunRank(store_path, rank, world, options);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "allreduce_bench rank %d: %s\n", rank, e.what());
      }
      std::fflush(stdout);
      std::_Exit(code);
    }
    pids.push_back(pid);
  }
  // A generous bound on the whole world size: every call is itself bounded by --timeout_s.
  const absl::Time deadline = absl::Now() + absl::Minutes(20);
  bool ok = true;
  size_t done = 0;
  while (done < pids.size()) {
    for (pid_t& pid : pids) {
      if (pid <= 0) continue;
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
        pid = -1;
        ++done;
      }
    }
    if (done < pids.size() && absl::Now() > deadline) {
      std::fprintf(stderr, "allreduce_bench: world %d did not finish in time; killing its ranks\n", world);
      for (pid_t pid : pids) {
        if (pid > 0) ::kill(pid, SIGKILL);
      }
      for (pid_t pid : pids) {
        if (pid > 0) ::waitpid(pid, nullptr, 0);
      }
      ok = false;
      break;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  ::unlink(store_path.c_str());
  return ok;
}

}  // namespace
}  // namespace ddp

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("allreduce_bench [--world_sizes=2,3,4] [--max_bytes=N] [--format=table|json]");
  absl::ParseCommandLine(argc, argv);
  ddp::BenchOptions options;
  options.min_bytes = absl::GetFlag(FLAGS_min_bytes);
  options.max_bytes = absl::GetFlag(FLAGS_max_bytes);
  options.json = absl::GetFlag(FLAGS_format) == "json";
  options.target_ms = absl::GetFlag(FLAGS_target_ms);
  options.min_iters = std::max(1, absl::GetFlag(FLAGS_min_iters));
  options.warmup = std::max(0, absl::GetFlag(FLAGS_warmup));
  options.timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  options.debug_detail = absl::GetFlag(FLAGS_debug_detail);
  options.reduce_scatter = absl::GetFlag(FLAGS_reduce_scatter);
  if (absl::GetFlag(FLAGS_format) != "json" && absl::GetFlag(FLAGS_format) != "table") {
    std::fprintf(stderr, "allreduce_bench: --format must be table or json\n");
    return 2;
  }
  if (options.min_bytes < 4 || options.min_bytes % 4 != 0 || options.max_bytes < options.min_bytes) {
    std::fprintf(stderr, "allreduce_bench: need 4 <= --min_bytes <= --max_bytes, multiples of 4\n");
    return 2;
  }
  std::vector<int> worlds;
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_world_sizes), ',', absl::SkipEmpty())) {
    int world = 0;
    if (!absl::SimpleAtoi(part, &world) || world < 1) {
      std::fprintf(stderr, "allreduce_bench: bad world size '%s'\n", std::string(part).c_str());
      return 2;
    }
    worlds.push_back(world);
  }
  std::fflush(stdout);  // Nothing buffered may be duplicated into the forked ranks.
  bool ok = true;
  for (int world : worlds) ok = ddp::RunWorld(world, options) && ok;
  return ok ? 0 : 1;
}
