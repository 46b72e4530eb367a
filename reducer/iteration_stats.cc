#include "reducer/iteration_stats.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "base/statistics.h"

namespace ddp {
namespace {

// Measure of the union of intervals clipped to [lo, hi].
double UnionSeconds(std::vector<TimeInterval> intervals, absl::Time lo, absl::Time hi) {
  for (auto& i : intervals) {
    i.start = std::max(i.start, lo);
    i.end = std::min(i.end, hi);
  }
  std::sort(intervals.begin(), intervals.end(), [](const auto& a, const auto& b) { return a.start < b.start; });
  double total = 0;
  absl::Time covered = absl::InfinitePast();
  for (const auto& i : intervals) {
    if (i.end <= i.start) continue;
    const absl::Time begin = std::max(i.start, covered);
    if (i.end > begin) {
      total += absl::ToDoubleSeconds(i.end - begin);
      covered = i.end;
    }
  }
  return total;
}

}  // namespace

void ComputeOverlap(const std::vector<TimeInterval>& comm, absl::Time backward_end, IterationStats* stats) {
  stats->comm_s = UnionSeconds(comm, absl::InfinitePast(), absl::InfiniteFuture());
  stats->overlapped_comm_s = UnionSeconds(comm, absl::InfinitePast(), backward_end);
  absl::Time last_end = backward_end;
  for (const auto& i : comm) last_end = std::max(last_end, i.end);
  stats->exposed_comm_s = absl::ToDoubleSeconds(last_end - backward_end);
}

void IterationStatsRecorder::OnBucketDone(const BucketDoneEvent& event) {
  comm_.push_back({event.start, event.end});
  bytes_sent_ += event.bytes_sent;
}

void IterationStatsRecorder::OnIterationEnd(const IterationEndEvent& event) {
  IterationStats stats;
  stats.iteration = event.iteration;
  stats.buckets = event.buckets;
  stats.forward_s = absl::ToDoubleSeconds(event.backward_start - event.forward_start);
  stats.backward_compute_s = absl::ToDoubleSeconds(event.backward_end - event.backward_start);
  ComputeOverlap(comm_, event.backward_end, &stats);
  stats.bytes_sent = bytes_sent_;
  comm_.clear();
  bytes_sent_ = 0;
  history_.push_back(stats);
}

std::string FormatStatsTable(const std::vector<IterationStats>& history, int warmup) {
  const size_t skip = history.size() > static_cast<size_t>(warmup) ? warmup : 0;
  struct Field {
    const char* name;
    double IterationStats::*member;
  };
  const Field fields[] = {{"forward", &IterationStats::forward_s},
                          {"backward compute", &IterationStats::backward_compute_s},
                          {"communication", &IterationStats::comm_s},
                          {"  overlapped", &IterationStats::overlapped_comm_s},
                          {"  exposed", &IterationStats::exposed_comm_s}};
  std::string out = absl::StrFormat("DDP step breakdown over %d iterations (ms)\n%-18s %10s %10s\n",
                                    history.size() - skip, "", "mean", "p90");
  for (const Field& field : fields) {
    std::vector<double> values;
    for (size_t i = skip; i < history.size(); ++i) values.push_back(1000.0 * (history[i].*field.member));
    double mean = 0;
    for (double v : values) mean += v;
    if (!values.empty()) mean /= values.size();
    absl::StrAppendFormat(&out, "%-18s %10.3f %10.3f\n", field.name, mean, Percentile(values, 0.9));
  }
  std::vector<double> kib;
  for (size_t i = skip; i < history.size(); ++i) kib.push_back(history[i].bytes_sent / 1024.0);
  double mean_kib = 0;
  for (double v : kib) mean_kib += v;
  if (!kib.empty()) mean_kib /= kib.size();
  absl::StrAppendFormat(&out, "%-18s %10.1f %10.1f\n", "sent/step (KiB)", mean_kib, Percentile(kib, 0.9));
  return out;
}

}  // namespace ddp
