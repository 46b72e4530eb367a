// ddp_sim validate and ddp_sim scale: the two reports that compare many configurations.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/statistics.h"
#include "io/file.h"
#include "sim/cli_internal.h"

namespace ddp {
namespace sim {
namespace {

constexpr size_t kMiB = size_t{1} << 20;


// One row of bench/bucket_sweep.sh's CSV (index,config,buckets,step_ms,comm_ms,exposed_comm_ms,...).
struct SweepRow {
  std::string config;
  int buckets = 0;
  double step_ms = 0, comm_ms = 0, exposed_ms = 0;
};

absl::StatusOr<std::vector<SweepRow>> ParseSweepCsv(const std::string& text) {
  std::vector<SweepRow> rows;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipWhitespace())) {
    if (absl::StartsWith(line, "index,")) continue;
    std::vector<std::string> f = absl::StrSplit(line, ',');
    SweepRow row;
    if (f.size() < 6)
      return absl::InvalidArgumentError(absl::StrCat("bucket sweep CSV: short line \"", line, "\""));
    row.config = std::string(absl::StripSuffix(absl::StripPrefix(f[1], "\""), "\""));
    if (!absl::SimpleAtoi(f[2], &row.buckets) || !absl::SimpleAtod(f[3], &row.step_ms) ||
        !absl::SimpleAtod(f[4], &row.comm_ms) || !absl::SimpleAtod(f[5], &row.exposed_ms)) {
      return absl::InvalidArgumentError(absl::StrCat("bucket sweep CSV: bad numbers in \"", line, "\""));
    }
    rows.push_back(row);
  }
  if (rows.empty()) return absl::InvalidArgumentError("bucket sweep CSV has no rows");
  return rows;
}

// The label most of `runs` give row `i` (the first such run's on a tie), when every run's label starts
// with "auto ": --bucket_cap_mb=auto may choose other caps in another run of the sweep. Else the first
// run's label, or an error when the runs disagree.
absl::StatusOr<std::string> RowLabel(const std::vector<std::vector<SweepRow>>& runs, size_t i) {
  std::map<std::string, int> votes;
  bool automatic = true;
  for (const auto& run : runs) {
    ++votes[run[i].config];
    automatic = automatic && absl::StartsWith(run[i].config, "auto ");
  }
  if (votes.size() == 1) return runs[0][i].config;
  if (!automatic) return absl::InvalidArgumentError(absl::StrCat("sweeps disagree on row ", i));
  std::string best = runs[0][i].config;
  for (const auto& run : runs) {
    if (votes[run[i].config] > votes[best]) best = run[i].config;
  }
  return best;
}

// Several runs of the same sweep (comma-separated CSV paths) as one: per configuration, the median of
// each measured time (for the auto row, over the runs that chose the most common caps). Errors name a
// file that cannot be read or whose configurations differ.
absl::StatusOr<std::vector<SweepRow>> ReadSweeps(const std::string& paths) {
  std::vector<std::vector<SweepRow>> runs;
  for (absl::string_view path : absl::StrSplit(paths, ',', absl::SkipWhitespace())) {
    absl::StatusOr<std::string> text = ReadFile(std::string(path));
    if (!text.ok()) return text.status();
    absl::StatusOr<std::vector<SweepRow>> rows = ParseSweepCsv(*text);
    if (!rows.ok()) return rows.status();
    if (!runs.empty() && rows->size() != runs[0].size())
      return absl::InvalidArgumentError(absl::StrCat(path, ": another sweep's configurations"));
    runs.push_back(*std::move(rows));
  }
  if (runs.empty()) return absl::InvalidArgumentError("--sweep_csv names no file");
  std::vector<SweepRow> merged = runs[0];
  for (size_t i = 0; i < merged.size(); ++i) {
    absl::StatusOr<std::string> label = RowLabel(runs, i);
    if (!label.ok()) return label.status();
    std::vector<double> step, comm, exposed;
    for (const auto& run : runs) {
      if (run[i].config != *label) continue;
      if (step.empty()) merged[i] = run[i];
      step.push_back(run[i].step_ms), comm.push_back(run[i].comm_ms), exposed.push_back(run[i].exposed_ms);
    }
    merged[i].step_ms = Median(step), merged[i].comm_ms = Median(comm),
    merged[i].exposed_ms = Median(exposed);
  }
  return merged;
}

// How bench/bucket_sweep.sh ran a configuration: its caps, whether buckets overlap backward, and whether
// it is a cap setting (a candidate for the best cap) rather than an ablation.
struct SweepSetting {
  BucketCaps caps;
  bool overlap = true;
  bool is_cap = true;
};

// Bytes of a cap written in MiB ("inf": one bucket), or nullopt.
std::optional<size_t> CapBytesOf(absl::string_view mib_text) {
  absl::StatusOr<size_t> bytes = CapBytes(mib_text);
  if (!bytes.ok()) return std::nullopt;
  return *bytes;
}

absl::StatusOr<SweepSetting> SettingOf(const std::string& config) {
  SweepSetting s;
  s.caps = BucketCaps{kMiB, 25 * kMiB};
  if (config == "no_overlap") return SweepSetting{s.caps, false, false};
  if (config == "single_allreduce") return SweepSetting{BucketCaps{SIZE_MAX, SIZE_MAX}, false, false};
  if (absl::StartsWith(config, "default")) return s;
  // "auto F/C" or "auto C": the caps --bucket_cap_mb=auto chose, predicted as such but not a candidate
  // of the sweep's own best cap.
  absl::string_view text = config;
  const bool chosen = absl::ConsumePrefix(&text, "auto ");
  const std::vector<absl::string_view> parts = absl::StrSplit(text, '/');
  std::optional<size_t> first = CapBytesOf(parts[0]);
  std::optional<size_t> cap = CapBytesOf(parts.back());
  if (parts.size() > 2 || !first || !cap)
    return absl::InvalidArgumentError(absl::StrCat("unknown sweep config \"", config, "\""));
  s.caps = BucketCaps{*first, *cap};
  s.is_cap = !chosen;
  return s;
}

// The summary lines of a validation: errors, and the measured cost of trusting the prediction: of its
// best cap (the shortest predicted step), and of the caps a chooser would take from it (the default caps
// unless another setting is predicted to save kMinPredictedGain of a step, as --bucket_cap_mb=auto does).
std::string ValidationSummary(const std::vector<SweepRow>& rows, const std::vector<double>& predicted_ms,
                              const std::vector<bool>& is_cap) {
  std::vector<double> errors;
  size_t best_measured = rows.size(), best_predicted = rows.size(), default_row = rows.size();
  for (size_t i = 0; i < rows.size(); ++i) {
    errors.push_back(std::abs(predicted_ms[i] / rows[i].step_ms - 1));
    if (!is_cap[i]) continue;
    if (absl::StartsWith(rows[i].config, "default")) default_row = i;
    if (best_measured == rows.size() || rows[i].step_ms < rows[best_measured].step_ms) best_measured = i;
    if (best_predicted == rows.size() || predicted_ms[i] < predicted_ms[best_predicted]) best_predicted = i;
  }
  std::string out = absl::StrFormat("step time error: median %.1f%%, max %.1f%% over %d configurations\n",
                                    100 * Median(errors),
                                    100 * *std::max_element(errors.begin(), errors.end()), rows.size());
  if (best_measured == rows.size()) return out;
  const double best_ms = rows[best_measured].step_ms;
  absl::StrAppendFormat(&out, "best cap: measured \"%s\" %.2f ms; predicted best \"%s\" measured %.2f ms (+%.1f%%)\n",
                        rows[best_measured].config, best_ms, rows[best_predicted].config,
                        rows[best_predicted].step_ms, 100 * (rows[best_predicted].step_ms / best_ms - 1));
  if (default_row < rows.size()) {
    const bool worth_it = predicted_ms[best_predicted] < (1 - kMinPredictedGain) * predicted_ms[default_row];
    const size_t chosen = worth_it ? best_predicted : default_row;
    absl::StrAppendFormat(&out,
                          "chosen cap (default unless another is predicted to save %.0f%% of a step): \"%s\" "
                          "measured %.2f ms (+%.1f%%)\n",
                          100 * kMinPredictedGain, rows[chosen].config, rows[chosen].step_ms,
                          100 * (rows[chosen].step_ms / best_ms - 1));
  }
  return out;
}

// What one row ran, as the simulator lays it out: its buckets and whether they overlap backward.
struct RowLayout {
  std::vector<std::vector<size_t>> buckets;
  bool overlap = true;
  bool operator<(const RowLayout& o) const {
    return std::tie(buckets, overlap) < std::tie(o.buckets, o.overlap);
  }
};

// The best-cap line again with the cap rows that run the same layout pooled (their measured times
// averaged; the label joins their names): caps 5, 25 and 100 MiB are one experiment when each gives one
// bucket, and the lowest of three noisy measurements of it is luck, not a better cap. "" when no layout
// is shared by two rows.
std::string PooledLayoutSummary(const std::vector<SweepRow>& rows, const std::vector<double>& predicted_ms,
                                const std::vector<bool>& is_cap, const std::vector<RowLayout>& layouts) {
  struct Pool {
    std::string label;
    double measured_sum = 0, predicted_ms = 0;
    int count = 0;
  };
  std::map<RowLayout, Pool> pools;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!is_cap[i]) continue;
    Pool& pool = pools[layouts[i]];
    pool.label += (pool.count > 0 ? "|" : "") + rows[i].config;
    pool.measured_sum += rows[i].step_ms;
    pool.predicted_ms = predicted_ms[i];  // the same layout: the same prediction
    ++pool.count;
  }
  const Pool* best_measured = nullptr;
  const Pool* best_predicted = nullptr;
  bool shared = false;
  for (const auto& [layout, pool] : pools) {
    shared = shared || pool.count > 1;
    const double mean = pool.measured_sum / pool.count;
    if (best_measured == nullptr || mean < best_measured->measured_sum / best_measured->count) {
      best_measured = &pool;
    }
    if (best_predicted == nullptr || pool.predicted_ms < best_predicted->predicted_ms) best_predicted = &pool;
  }
  if (!shared || best_measured == nullptr) return "";
  const double best_ms = best_measured->measured_sum / best_measured->count;
  const double predicted_best_ms = best_predicted->measured_sum / best_predicted->count;
  return absl::StrFormat(
      "best layout (cap rows with the same buckets pooled): measured \"%s\" %.2f ms; predicted best \"%s\" "
      "measured %.2f ms (+%.1f%%)\n",
      best_measured->label, best_ms, best_predicted->label, predicted_best_ms,
      100 * (predicted_best_ms / best_ms - 1));
}

// Every cap setting the scaling report tries: one bucket per parameter, and caps from 0.25 MiB to one
// bucket, each with a first bucket of 1 MiB (PyTorch's) or of the same cap.
std::vector<BucketCaps> CapCandidates() {
  std::vector<BucketCaps> out = {BucketCaps{0, 0}};
  for (double mib : {0.25, 1.0, 5.0, 10.0, 25.0, 50.0, 100.0, 200.0, 400.0, -1.0}) {
    const size_t cap = mib < 0 ? SIZE_MAX : static_cast<size_t>(mib * kMiB);
    out.push_back(BucketCaps{cap, cap});
    if (cap != kMiB) out.push_back(BucketCaps{kMiB, cap});
  }
  return out;
}

// The best (algorithm, caps) for `flags.preset`'s cluster at `world` ranks, and that algorithm's step
// with PyTorch's default caps (1 MiB, then 25 MiB).
struct ScalePoint {
  AllReduceAlgorithm algorithm = AllReduceAlgorithm::kRing;
  CapChoice best;
  double default_caps_step_s = 0;
};

absl::StatusOr<ScalePoint> BestAt(const ComputeProfile& profile, const CliFlags& flags, int world) {
  absl::StatusOr<SimOptions> options = LoadOptions(flags, world);
  if (!options.ok()) return options.status();
  ScalePoint point;
  bool first = true;
  for (auto algorithm :
       {AllReduceAlgorithm::kRing, AllReduceAlgorithm::kTree, AllReduceAlgorithm::kHierarchical}) {
    options->algorithm = algorithm;
    CapChoice choice = ChooseCaps(profile, *options, CapCandidates());
    if (first || choice.prediction.step_s < point.best.prediction.step_s) {
      point.algorithm = algorithm;
      point.best = std::move(choice);
    }
    first = false;
  }
  options->algorithm = point.algorithm;
  options->caps = BucketCaps{};
  point.default_caps_step_s = SimulateStep(profile, *options).step_s;
  return point;
}

}  // namespace

absl::StatusOr<std::string> RunValidate(const CliFlags& flags) {
  absl::StatusOr<ComputeProfile> profile = LoadProfile(flags);
  if (!profile.ok()) return profile.status();
  absl::StatusOr<SimOptions> options = LoadOptions(flags, flags.world_size);
  if (!options.ok()) return options.status();
  absl::StatusOr<std::vector<SweepRow>> rows = ReadSweeps(flags.sweep_csv);
  if (!rows.ok()) return rows.status();
  std::string table = absl::StrFormat("%-17s %7s %9s %9s %7s %9s %9s %9s %9s\n", "config (MiB)", "buckets",
                                      "step ms", "pred ms", "error", "comm ms", "pred", "exposed", "pred");
  std::string out_csv =
      "index,config,measured_step_ms,predicted_step_ms,error_pct,measured_comm_ms,predicted_comm_ms,"
      "measured_exposed_ms,predicted_exposed_ms,measured_buckets,predicted_buckets\n";
  std::vector<double> predicted;
  std::vector<bool> is_cap;
  std::vector<RowLayout> layouts;
  for (size_t i = 0; i < rows->size(); ++i) {
    const SweepRow& r = (*rows)[i];
    absl::StatusOr<SweepSetting> setting = SettingOf(r.config);
    if (!setting.ok()) return setting.status();
    options->caps = setting->caps;
    options->overlap = setting->overlap && !flags.no_overlap;  // --no_overlap: this machine cannot overlap
    const StepPrediction p = SimulateStep(*profile, *options);
    const double error = 100 * (1e3 * p.step_s / r.step_ms - 1);
    predicted.push_back(1e3 * p.step_s);
    is_cap.push_back(setting->is_cap);
    layouts.push_back(RowLayout{p.buckets, options->overlap});
    absl::StrAppendFormat(&table, "%-17s %3d/%-3d %9.2f %9.2f %+6.1f%% %9.2f %9.2f %9.2f %9.2f\n", r.config,
                          r.buckets, p.buckets.size(), r.step_ms, 1e3 * p.step_s, error, r.comm_ms,
                          1e3 * p.comm_s, r.exposed_ms, 1e3 * p.exposed_comm_s);
    absl::StrAppendFormat(&out_csv, "%d,\"%s\",%.3f,%.3f,%.2f,%.3f,%.3f,%.3f,%.3f,%d,%d\n", i, r.config,
                          r.step_ms, 1e3 * p.step_s, error, r.comm_ms, 1e3 * p.comm_s, r.exposed_ms,
                          1e3 * p.exposed_comm_s, r.buckets, p.buckets.size());
  }
  absl::StrAppend(&table, ValidationSummary(*rows, predicted, is_cap),
                  PooledLayoutSummary(*rows, predicted, is_cap, layouts));
  if (!flags.out.empty()) {
    absl::Status written = WriteFileAtomically(flags.out, out_csv);
    if (!written.ok()) return written;
    absl::StrAppend(&table, "wrote ", flags.out, "\n");
  }
  return table;
}

absl::StatusOr<std::string> RunScale(const CliFlags& flags) {
  absl::StatusOr<ComputeProfile> profile = LoadProfile(flags);
  if (!profile.ok()) return profile.status();
  const double alone_s = profile->forward_s + profile->backward_s + profile->other_s;
  std::string out = absl::StrFormat("one rank, no communication: %.3f ms per step\n\n", 1e3 * alone_s);
  absl::StrAppend(
      &out,
      "| link | ranks | step ms | comm ms | exposed ms | efficiency | best caps (MiB) | algorithm | "
      "step ms at 1/25 |\n",
      "|---|---:|---:|---:|---:|---:|---|---|---:|\n");
  for (absl::string_view preset : absl::StrSplit(flags.presets, ',', absl::SkipWhitespace())) {
    CliFlags f = flags;
    f.preset = std::string(preset);
    for (absl::string_view ranks : absl::StrSplit(flags.ranks, ',', absl::SkipWhitespace())) {
      int world = 0;
      if (!absl::SimpleAtoi(ranks, &world) || world < 1)
        return absl::InvalidArgumentError(absl::StrCat("--ranks: bad entry \"", ranks, "\""));
      absl::StatusOr<ScalePoint> point = BestAt(*profile, f, world);
      if (!point.ok()) return point.status();
      const StepPrediction& p = point->best.prediction;
      absl::StrAppendFormat(&out, "| %s | %d | %.2f | %.2f | %.2f | %.1f%% | %s | %s | %.2f |\n", preset,
                            world, 1e3 * p.step_s, 1e3 * p.comm_s, 1e3 * p.exposed_comm_s,
                            100 * alone_s / p.step_s, CapsLabel(point->best.caps),
                            AlgorithmName(point->algorithm), 1e3 * point->default_caps_step_s);
    }
  }
  return out;
}

}  // namespace sim
}  // namespace ddp
