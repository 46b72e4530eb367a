// allreduce_bench: nccl-tests-style all-reduce table (float32 sum) for ProcessGroupGloo, raw Gloo and
// (with --impls) ProcessGroupShm, measured in the same run, to show what our ProcessGroup adds over the
// library it wraps and what the shared-memory backend gains over both.
//
//   bazel run //bench:allreduce                                  # world 2,3,4; 4 B .. 64 MiB; ours, raw
//   bazel run //bench:allreduce -- --impls=ours,raw,shm           # adds ProcessGroupShm ("shm") rows
//   bazel run //bench:allreduce -- --max_bytes=268435456          # up to 256 MiB (about 2x longer)
//   bazel run //bench:allreduce -- --world_sizes=2 --format=json  # one JSON object per row
//   bazel run //bench:allreduce -- --world_sizes=2 --debug_detail # "ours" under DDP_DEBUG=detail
//   bazel run //bench:allreduce -- --world_sizes=2 --min_bytes=1048576 --reduce_scatter
//                                                  # adds a reduce-scatter row ("rs") beside "ours"
// bench/allreduce_all.sh puts these rows beside our mpi backend's and raw MPI's in one table.
//
// For each world size the binary forks that many rank processes (ranks as processes, as in a real job),
// which rendezvous through a FileStore in $TMPDIR (bench/allreduce_impls.h): two Gloo contexts over
// loopback TCP with the same options (device hostname 127.0.0.1, same timeout), one inside
// ProcessGroupGloo, measured as `AllReduce(t)->Wait()` ("ours": hand-off to the group's worker thread,
// completion, wake-up), and one used directly with `gloo::allreduce` on the calling thread ("raw", reduce
// function gloo::sum<float>); with "shm" in --impls also a ProcessGroupShm, measured as
// `AllReduce(t)->Wait()` on the same buffer ("shm": small all-reduces run on the calling thread, larger
// ones on the group's worker; Note [Inline collectives] in comm/shm/process_group_shm.cc); "shm_buf" the same
// on a tensor from NewCommBuffer, as DDP's buckets; "floor" the leanest program of shm_buf's algorithm
// (Note [Floor all-reduce] in bench/shm_floor.h), the yardstick of what this machine allows.
// --impls (default ours,raw: the rows BENCHMARKS.md's tables came from) lists the timed ones; the raw
// context exists in every run because it carries the benchmark's control traffic.
//
// Before timing, each world checks every listed impl once: an all-reduce of rank+1 must give
// world*(world+1)/2 in every element on every rank (exit code 4 otherwise), so a row is never the time
// of a wrong answer.
//
// Method, per message size: --warmup calls per impl; rank 0 picks the iteration count from the warm-up
// (about --target_ms per impl, at least --min_iters) and broadcasts it; then `iters` rounds, each calling
// every impl once, each call timed on its own. Round r starts at impl r mod N and goes through --impls in
// order (rotation: with two impls this is ABBA, ours, raw, raw, ours, ...), so load on the machine hits
// all impls alike. The reported time is the median per call (robust to the preemptions of a shared
// 2-core machine, which a mean is not), taken as the maximum over ranks.
//
// Note [Settle calls]
//   A timed call starts when this rank enters it and ends when this rank has the result, so it also
//   contains the arrival skew the previous call left: the ranks leave a Gloo all-reduce tens of
//   microseconds apart (the ring's last message, wake-ups), and the next impl's call waits that long for
//   its peer. For Gloo (about 100 us at small sizes) that is noise; for shm (a few us) it is most of the
//   time: a small shm call right after Gloo calls reads about ten times what it does after one untimed
//   shm call. --settle_calls=N makes N untimed calls of the same impl right before each timed one
//   (all impls alike, so the rotation still spreads load evenly; the run takes N+1 times as long), which
//   times each impl as back-to-back calls of that impl would, the way bench/backend_allreduce_bench and
//   MPI benchmarks time it. The default 0 keeps the method BENCHMARKS.md's ours/raw rows were taken
//   with; bench/allreduce_all.sh passes 1 so that its shm column compares with the mpi columns.
//
// On a shared machine (other processes busy on the cores) a woken thread often waits for the next
// scheduler tick (4 ms here), which swamps microsecond differences; run with real-time priority there:
//   sudo chrt -f 5 bazel-bin/bench/allreduce        # default sizes take ~15-30 s on 2 cores
// --world_sizes=1 isolates our fixed cost: no communication happens, so "ours" is the pure round trip
// through the group's worker thread (issue, wake-up, completion, wake-up of the waiter).
// algbw = bytes / time; busbw = algbw * 2(n-1)/n (nccl-tests' all-reduce bus bandwidth). Rank 0 prints.
//
// Ratios are always against "ours" (ProcessGroupGloo), or of "ours" against "raw": in the table the
// ratio and extra_us columns of the ours row are ours/raw and ours - raw, those
// of a shm row shm/ours and shm - ours, those of an rs row rs/ours. In JSON every all-reduce row carries
// "ours_over_raw" (the size's ours/raw, when both were timed) and "over_ours" (the row's time over the
// size's ours time, when ours was timed). The summary line adds, with shm timed, shm's speed-up over
// ours against the shared-memory backend's targets (>= 10x up to 4 MiB, >= 3x at 64 MiB, world 2).
// With --reduce_scatter, each size also times ProcessGroupGloo::ReduceScatter of the same `bytes` per rank
// (n chunks of bytes/4/n floats: the ring of Note [Ring reduce-scatter] in
// comm/gloo/process_group_gloo_collectives.cc), after the rotation loop, and prints it as an "rs" row whose
// ratio column is rs/ours (reduce-scatter time over all-reduce time of the same buffer); its busbw is
// algbw * (n-1)/n, as nccl-tests reports reduce-scatter.
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
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/statistics.h"
#include "bench/allreduce_impls.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"

ABSL_FLAG(std::string, world_sizes, "2,3,4", "Comma-separated world sizes (processes on this host).");
ABSL_FLAG(std::string, impls, "ours,raw",
          "Timed implementations, comma-separated, in rotation order: ours (ProcessGroupGloo), raw "
          "(gloo::allreduce), shm (ProcessGroupShm), shm_buf (ProcessGroupShm on NewCommBuffer tensors, as DDP's "
          "buckets), floor (shm_buf's algorithm with nothing else, bench/shm_floor.h: the yardstick).");
ABSL_FLAG(int64_t, min_bytes, 4, "Smallest message in bytes (a multiple of 4).");
ABSL_FLAG(int64_t, max_bytes, int64_t{64} << 20,
          "Largest message in bytes; sizes double from --min_bytes. 268435456 for nccl-tests' 256 MiB.");
ABSL_FLAG(std::string, format, "table", "table (human-readable) or json (one object per row).");
ABSL_FLAG(double, target_ms, 50.0, "Aim for this much time per impl and size.");
ABSL_FLAG(int, min_iters, 10, "Fewest timed calls per impl and size.");
ABSL_FLAG(int, warmup, 2, "Untimed calls per impl and size.");
ABSL_FLAG(int, settle_calls, 0,
          "Untimed calls of the same impl right before each timed call (Note [Settle calls]); 0: none.");
ABSL_FLAG(bool, verbose, false, "Rank 0 also prints its own p10/p50/p90 per call and impl on stderr.");
ABSL_FLAG(bool, debug_detail, false,
          "\"ours\" runs under DDP_DEBUG=detail (ProcessGroupDebug: the ranks compare each call first), so "
          "the difference against a run without the flag is that mode's cost per collective.");
ABSL_FLAG(bool, reduce_scatter, false,
          "Also time ProcessGroupGloo::ReduceScatter of each size (one row \"rs\" beside \"ours\").");
ABSL_FLAG(int, corrupt_check_at_rank, -1,
          "Testing: this rank adds 1 to its input of the pre-timing result check, which must then fail "
          "(exit code 4 in every rank; bench/allreduce_test.sh proves the check can fail).");
ABSL_FLAG(double, timeout_s, 120.0, "Bound on every rendezvous and every call (all impls).");

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
  int settle_calls = 0;                 // untimed calls of an impl before each of its timed calls
  bool reduce_scatter = false;          // also time ProcessGroupGloo::ReduceScatter per size (needs ours)
  int corrupt_check_at_rank = -1;       // testing: this rank's check input is off by one (-1: none)
  BenchRankOptions rank;                // timed impls (rotation order), timeout, --debug_detail
};


// The measurements of one message size.
struct Row {
  int64_t bytes = 0;
  std::vector<AllReduceImpl> impls;  // as --impls
  std::vector<double> seconds;       // seconds[i]: median seconds per call of impls[i], maximum over ranks
  double reduce_scatter_s = 0.0;     // --reduce_scatter: median seconds per reduce-scatter, max over ranks

  // Seconds of `impl`, or 0 when it was not timed.
  double Of(AllReduceImpl impl) const {
    for (size_t i = 0; i < impls.size(); ++i) {
      if (impls[i] == impl) return seconds[i];
    }
    return 0.0;
  }
};

// Each listed impl once on a buffer of rank+1 (+1 more on `corrupt_rank`, to test this check): every
// element must come back as world*(world+1)/2 (exact in float32 at these sizes). A wrong result ends the
// rank with exit code 4 naming the impl.
void VerifyImpls(BenchRank& ranks, const std::vector<AllReduceImpl>& impls, int corrupt_rank) {
  const float expected = 0.5f * static_cast<float>(ranks.size() * (ranks.size() + 1));
  const float input = static_cast<float>(ranks.rank() + 1 + (ranks.rank() == corrupt_rank ? 1 : 0));
  for (AllReduceImpl impl : impls) {
    for (int64_t count : {int64_t{1}, int64_t{3000}, int64_t{300001}}) {  // a lane; lanes and a tail; slices
      Tensor t = ranks.NewTensor(impl, count);
      FillInPlace(t, input);
      ranks.AllReduce(impl, t);
      const float* data = t.data<float>();
      for (int64_t i = 0; i < count; ++i) {
        if (data[i] != expected) {
          std::fprintf(stderr,
                       "allreduce_bench rank %d: %s all-reduce of %lld floats gave %g at element %lld, "
                       "expected %g\n",
                       ranks.rank(), AllReduceImplName(impl), static_cast<long long>(count), data[i],
                       static_cast<long long>(i), expected);
          std::fflush(stdout);
          std::_Exit(4);
        }
      }
    }
  }
  ranks.Barrier();
}

// Median seconds per ProcessGroupGloo::ReduceScatter (sum) of `bytes` per rank, after `warmup` calls.
double MeasureReduceScatter(BenchRank& ranks, int64_t bytes, int iters, const BenchOptions& options) {
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

// Rank 0's own p10/p50/p90 per impl on stderr (--verbose).
void PrintPercentiles(int64_t bytes, const std::vector<AllReduceImpl>& impls,
                      const std::vector<std::vector<double>>& seconds) {
  for (size_t k = 0; k < impls.size(); ++k) {
    std::vector<double> v = seconds[k];
    std::sort(v.begin(), v.end());
    std::fprintf(stderr, "# %lld B %s rank 0: %zu calls, p10 %.1f us, p50 %.1f us, p90 %.1f us\n",
                 static_cast<long long>(bytes), AllReduceImplName(impls[k]), v.size(), v[v.size() / 10] * 1e6,
                 v[v.size() / 2] * 1e6, v[v.size() * 9 / 10] * 1e6);
  }
}

// Every impl at one size: warm-up, an iteration count agreed from rank 0's warm-up, then `iters` rounds
// of one timed call per impl in rotating order (round r starts at impl r mod N; ABBA for two impls), so
// load on the machine hits all impls alike.
Row MeasureSize(BenchRank& ranks, int64_t bytes, const BenchOptions& options) {
  const std::vector<AllReduceImpl>& impls = options.rank.impls;
  const int n = static_cast<int>(impls.size());
  // Zeros stay zeros under sum: no overflow, no denormals. One tensor per impl (shm_buf's is its own).
  std::vector<Tensor> tensors;
  for (AllReduceImpl impl : impls) tensors.push_back(ranks.NewTensor(impl, bytes / 4));
  const Clock::time_point warm_start = Clock::now();
  for (int k = 0; k < n; ++k) {
    for (int i = 0; i < options.warmup; ++i) ranks.AllReduce(impls[k], tensors[k]);
  }
  const double per_call = std::chrono::duration<double>(Clock::now() - warm_start).count() /
                          std::max(1, n * options.warmup);
  const int64_t wanted = static_cast<int64_t>(options.target_ms * 1e-3 / std::max(per_call, 1e-7));
  const int iters = static_cast<int>(
      ranks.BroadcastFromZero(std::clamp<int64_t>(wanted, options.min_iters, 100000)));
  std::vector<std::vector<double>> seconds(impls.size());
  ranks.Barrier();
  for (int round = 0; round < iters; ++round) {
    for (int k = 0; k < n; ++k) {
      const int which = (round + k) % n;
      for (int i = 0; i < options.settle_calls; ++i) ranks.AllReduce(impls[which], tensors[which]);
      const Clock::time_point start = Clock::now();
      ranks.AllReduce(impls[which], tensors[which]);
      seconds[which].push_back(std::chrono::duration<double>(Clock::now() - start).count());
    }
  }
  if (ranks.rank() == 0 && absl::GetFlag(FLAGS_verbose)) PrintPercentiles(bytes, impls, seconds);
  Row row;
  row.bytes = bytes;
  row.impls = impls;
  for (const std::vector<double>& v : seconds) row.seconds.push_back(ranks.MaxOverRanks(Median(v)));
  if (options.reduce_scatter) row.reduce_scatter_s = MeasureReduceScatter(ranks, bytes, iters, options);
  return row;
}

// The table's ratio and extra columns of `impl`'s row: ours against raw, any other impl against ours;
// false when the reference was not timed (raw rows, and rows without ours).
bool RatioOf(const Row& row, AllReduceImpl impl, double* ratio, double* extra_us) {
  const double s = row.Of(impl);
  const double reference =
      impl == AllReduceImpl::kOurs ? row.Of(AllReduceImpl::kRaw) : row.Of(AllReduceImpl::kOurs);
  if (impl == AllReduceImpl::kRaw || reference <= 0.0) return false;
  *ratio = s / reference;
  *extra_us = (s - reference) * 1e6;
  return true;
}

void PrintJsonRow(const Row& row, AllReduceImpl impl, int world) {
  const double s = row.Of(impl);
  const double algbw = row.bytes / s / 1e9;
  const double busbw = algbw * 2.0 * (world - 1) / world;
  std::string ratios;
  const double ours = row.Of(AllReduceImpl::kOurs), raw = row.Of(AllReduceImpl::kRaw);
  if (ours > 0.0 && raw > 0.0) absl::StrAppendFormat(&ratios, ", \"ours_over_raw\": %.4f", ours / raw);
  if (ours > 0.0) absl::StrAppendFormat(&ratios, ", \"over_ours\": %.4f", s / ours);
  std::printf(
      "{\"bytes\": %lld, \"time_us\": %.2f, \"algbw_gbps\": %.4f, \"busbw_gbps\": %.4f, \"impl\": \"%s\", "
      "\"world_size\": %d%s}\n",
      static_cast<long long>(row.bytes), s * 1e6, algbw, busbw, AllReduceImplName(impl), world,
      ratios.c_str());
}

void PrintTableRow(const Row& row, AllReduceImpl impl, int world) {
  const double s = row.Of(impl);
  const double algbw = row.bytes / s / 1e9;
  const double busbw = algbw * 2.0 * (world - 1) / world;
  std::printf("%12lld %12.2f %11.4f %11.4f %6s", static_cast<long long>(row.bytes), s * 1e6, algbw, busbw,
              AllReduceImplName(impl));
  double ratio = 0.0, extra_us = 0.0;
  if (RatioOf(row, impl, &ratio, &extra_us)) {
    std::printf(" %9.3f %+10.2f\n", ratio, extra_us);
  } else {
    std::printf("\n");
  }
}

void PrintRow(const Row& row, int world, bool json) {
  for (AllReduceImpl impl : row.impls) {
    if (json) {
      PrintJsonRow(row, impl, world);
    } else {
      PrintTableRow(row, impl, world);
    }
  }
  if (row.reduce_scatter_s > 0.0) {
    const double algbw = row.bytes / row.reduce_scatter_s / 1e9;
    const double busbw = algbw * (world - 1) / world;
    const double ours_s = row.Of(AllReduceImpl::kOurs);
    const double over_allreduce = row.reduce_scatter_s / ours_s;
    if (json) {
      std::printf(
          "{\"bytes\": %lld, \"time_us\": %.2f, \"algbw_gbps\": %.4f, \"busbw_gbps\": %.4f, \"impl\": "
          "\"reduce_scatter\", \"world_size\": %d, \"rs_over_allreduce\": %.4f}\n",
          static_cast<long long>(row.bytes), row.reduce_scatter_s * 1e6, algbw, busbw, world, over_allreduce);
    } else {
      std::printf("%12lld %12.2f %11.4f %11.4f %6s %9.3f %+10.2f\n", static_cast<long long>(row.bytes),
                  row.reduce_scatter_s * 1e6, algbw, busbw, "rs", over_allreduce,
                  (row.reduce_scatter_s - ours_s) * 1e6);
    }
  }
  std::fflush(stdout);
}

// The ours-against-raw verdict: <= 5% over raw at >= 1 MiB, <= 50 us extra at 4 B. Single large sizes
// are noisy on a shared machine (few calls each), so the median ratio over all sizes >= 1 MiB is the
// verdict; the worst one is printed next to it. Appends one item per verdict to `items`.
void OursSummary(const std::vector<Row>& rows, std::vector<std::string>& items) {
  std::vector<double> large_ratios;
  double worst = 0.0;
  int64_t worst_bytes = 0;
  for (const Row& row : rows) {
    if (row.bytes < (int64_t{1} << 20)) continue;
    const double ratio = row.Of(AllReduceImpl::kOurs) / row.Of(AllReduceImpl::kRaw);
    large_ratios.push_back(ratio);
    if (ratio > worst) {
      worst = ratio;
      worst_bytes = row.bytes;
    }
  }
  if (!large_ratios.empty()) {
    const double median = Median(large_ratios);
    items.push_back(
        absl::StrFormat("median ours/raw at >= 1 MiB: %.3f (target <= 1.05: %s; worst %.3f at %d B)", median,
                        median <= 1.05 ? "met" : "MISSED", worst, worst_bytes));
  }
  if (!rows.empty() && rows.front().bytes == 4) {
    const Row& row = rows.front();
    const double extra_us = (row.Of(AllReduceImpl::kOurs) - row.Of(AllReduceImpl::kRaw)) * 1e6;
    items.push_back(absl::StrFormat("extra at 4 B: %+.1f us (target <= 50 us: %s)", extra_us,
                                    extra_us <= 50.0 ? "met" : "MISSED"));
  }
}

// `impl`'s (shm or shm_buf) speed-up over ours against the shared-memory backend's targets (for world
// 2): >= 10x at every size up to 4 MiB (the smallest speed-up is the verdict), >= 3x at 64 MiB. Appends
// one item per verdict.
void ShmSummary(const std::vector<Row>& rows, AllReduceImpl impl, std::vector<std::string>& items) {
  const char* name = AllReduceImplName(impl);
  double slowest = 0.0;
  int64_t slowest_bytes = 0;
  for (const Row& row : rows) {
    if (row.bytes > (int64_t{4} << 20)) continue;
    const double speedup = row.Of(AllReduceImpl::kOurs) / row.Of(impl);
    if (slowest_bytes == 0 || speedup < slowest) {
      slowest = speedup;
      slowest_bytes = row.bytes;
    }
  }
  if (slowest_bytes != 0) {
    const char* verdict = slowest >= 10.0 ? "met" : "MISSED";
    items.push_back(
        absl::StrFormat("%s speed-up over ours up to 4 MiB: at least %.1fx, at %d B (target >= 10x: %s)", name,
                        slowest, slowest_bytes, verdict));
  }
  for (const Row& row : rows) {
    if (row.bytes != (int64_t{64} << 20)) continue;
    const double speedup = row.Of(AllReduceImpl::kOurs) / row.Of(impl);
    items.push_back(absl::StrFormat("%s speed-up at 64 MiB: %.1fx (target >= 3x: %s)", name, speedup,
                                    speedup >= 3.0 ? "met" : "MISSED"));
  }
}

// Rank 0's summary line of one world size (what the listed impls allow), items joined by "; ".
void PrintSummary(const std::vector<Row>& rows, int world) {
  if (rows.empty()) return;
  const Row& any = rows.front();
  const bool ours = any.Of(AllReduceImpl::kOurs) > 0.0;
  std::vector<std::string> items;
  if (!ours) items.push_back("none (the targets are against \"ours\", which was not timed)");
  if (ours && any.Of(AllReduceImpl::kRaw) > 0.0) OursSummary(rows, items);
  for (AllReduceImpl shm : {AllReduceImpl::kShm, AllReduceImpl::kShmBuf}) {
    if (ours && any.Of(shm) > 0.0) ShmSummary(rows, shm, items);
  }
  std::printf("# world %d summary: %s\n\n", world, absl::StrJoin(items, "; ").c_str());
  std::fflush(stdout);
}

// Rank 0's table header.
void PrintTableHeader(int world, const BenchOptions& options) {
  std::printf(
      "# all-reduce, float32 sum, world size %d (processes; Gloo over loopback TCP), median per call\n",
      world);
  std::printf("%12s %12s %11s %11s %6s %9s %10s\n", "bytes", "time_us", "algbw_gbps", "busbw_gbps", "impl",
              "ours/raw", "extra_us");
  for (AllReduceImpl impl : options.rank.impls) {
    if (impl == AllReduceImpl::kShm) {
      std::printf("# shm: ProcessGroupShm; its ratio and extra columns are against \"ours\" (shm/ours)\n");
    }
    if (impl == AllReduceImpl::kShmBuf) {
      std::printf("# shm_buf: ProcessGroupShm on a NewCommBuffer tensor (read in place, as DDP's buckets); "
                  "ratio and extra against \"ours\"\n");
    }
  }
  if (options.reduce_scatter) {
    std::printf("# rs: ReduceScatter (sum) of the same bytes per rank; its ratio and extra columns are "
                "against \"ours\" (the all-reduce)\n");
  }
  std::fflush(stdout);
}

// The body of one rank process.
int RunRank(const std::string& store_path, int rank, int world, const BenchOptions& options) {
  absl::StatusOr<std::unique_ptr<BenchRank>> ranks = BenchRank::Join(store_path, rank, world, options.rank);
  if (!ranks.ok()) {
    std::fprintf(stderr, "allreduce_bench rank %d: %s\n", rank, ranks.status().ToString().c_str());
    return 2;
  }
  VerifyImpls(**ranks, options.rank.impls, options.corrupt_check_at_rank);
  if (rank == 0 && !options.json) PrintTableHeader(world, options);
  std::vector<Row> rows;
  for (int64_t bytes = options.min_bytes; bytes <= options.max_bytes; bytes *= 2) {
    rows.push_back(MeasureSize(**ranks, bytes, options));
    if (rank == 0) PrintRow(rows.back(), world, options.json);
  }
  if (rank == 0 && !options.json) PrintSummary(rows, world);
  (*ranks)->Barrier();
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
  absl::SetProgramUsageMessage(
      "allreduce_bench [--world_sizes=2,3,4] [--impls=ours,raw[,shm]] [--max_bytes=N] [--format=table|json]");
  absl::ParseCommandLine(argc, argv);
  ddp::BenchOptions options;
  options.min_bytes = absl::GetFlag(FLAGS_min_bytes);
  options.max_bytes = absl::GetFlag(FLAGS_max_bytes);
  options.json = absl::GetFlag(FLAGS_format) == "json";
  options.target_ms = absl::GetFlag(FLAGS_target_ms);
  options.min_iters = std::max(1, absl::GetFlag(FLAGS_min_iters));
  options.warmup = std::max(0, absl::GetFlag(FLAGS_warmup));
  options.settle_calls = std::max(0, absl::GetFlag(FLAGS_settle_calls));
  options.reduce_scatter = absl::GetFlag(FLAGS_reduce_scatter);
  options.corrupt_check_at_rank = absl::GetFlag(FLAGS_corrupt_check_at_rank);
  options.rank.timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  options.rank.debug_detail = absl::GetFlag(FLAGS_debug_detail);
  // VerifyImpls all-reduces 300001 floats as well.
  options.rank.floor_bytes = std::max<size_t>(options.max_bytes, 300001 * sizeof(float));
  absl::StatusOr<std::vector<ddp::AllReduceImpl>> impls =
      ddp::ParseAllReduceImpls(absl::GetFlag(FLAGS_impls));
  if (!impls.ok()) {
    std::fprintf(stderr, "allreduce_bench: %s\n", std::string(impls.status().message()).c_str());
    return 2;
  }
  options.rank.impls = *impls;
  const bool has_ours = std::count(impls->begin(), impls->end(), ddp::AllReduceImpl::kOurs) > 0;
  if ((options.reduce_scatter || options.rank.debug_detail) && !has_ours) {
    std::fprintf(stderr, "allreduce_bench: --reduce_scatter and --debug_detail need \"ours\" in --impls\n");
    return 2;
  }
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
