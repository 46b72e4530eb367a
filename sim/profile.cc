#include "sim/profile.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"

namespace ddp {
namespace sim {
namespace {

using nlohmann::json;

// One rank's events, times in microseconds, sorted by start.
struct RankEvents {
  std::vector<std::pair<double, double>> forward, backward, comm;  // (start, end)
  std::vector<std::pair<double, std::string>> ready;               // (at, parameter name)
  std::map<std::string, int64_t> numel;  // each parameter's size, where its grad-ready events give one
};

absl::StatusOr<RankEvents> CollectEvents(absl::string_view text, int rank) {
  const json trace = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (!trace.is_object() || !trace.contains("traceEvents") || !trace["traceEvents"].is_array()) {
    return absl::InvalidArgumentError("not a Chrome trace (no \"traceEvents\" array)");
  }
  RankEvents events;
  for (const json& e : trace["traceEvents"]) {
    if (!e.is_object() || e.value("pid", -1) != rank || !e.contains("ts")) continue;
    const std::string name = e.value("name", "");
    const double ts = e["ts"].get<double>(), end = ts + e.value("dur", 0.0);
    if (name == "forward") events.forward.emplace_back(ts, end);
    if (name == "backward") events.backward.emplace_back(ts, end);
    if (absl::StartsWith(name, "bucket ")) events.comm.emplace_back(ts, end);
    if (absl::StartsWith(name, "grad ready: ")) {
      events.ready.emplace_back(ts, name.substr(12));
      const json* args = e.contains("args") && e["args"].is_object() ? &e["args"] : nullptr;
      if (args != nullptr && args->contains("numel") && (*args)["numel"].is_number_integer()) {
        events.numel.emplace(name.substr(12), (*args)["numel"].get<int64_t>());
      }
    }
  }
  for (auto* v : {&events.forward, &events.backward, &events.comm}) std::sort(v->begin(), v->end());
  std::stable_sort(events.ready.begin(), events.ready.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  if (events.forward.size() != events.backward.size() || events.forward.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, "'s track has ", events.forward.size(),
                                                   " forward and ", events.backward.size(),
                                                   " backward spans"));
  }
  return events;
}

// Sums (over iterations `used`) one iteration's contributions into `sums`; see Note [Profile from a trace].
struct Sums {
  double forward = 0, backward = 0, other = 0;
  int counted = 0;            // iterations summed
  std::vector<double> ready;  // per parameter, microseconds after backward start
  std::vector<int> ready_count;
};

// The compute of every timed iteration, for the jitter: forward + backward, and "other" where the
// iteration counts (nullopt where the next iteration lies outside its range, as at the end of an
// interleaved block, whose next step comes after a layout switch).
struct TimedCompute {
  std::vector<double> forward_backward;        // microseconds
  std::vector<std::optional<double>> other;    // microseconds
  std::vector<size_t> iteration;               // the index of each of them, ascending
};

absl::Status AddIteration(const RankEvents& ev, size_t i, const std::map<std::string, size_t>& index,
                          Sums* sums) {
  const double bwd_start = ev.backward[i].first, bwd_end = ev.backward[i].second;
  const double next = ev.forward[i + 1].first;
  double last_comm = bwd_end;
  for (const auto& [start, end] : ev.comm) {
    if (start >= bwd_start && start < next) last_comm = std::max(last_comm, end);
  }
  sums->forward += ev.forward[i].second - ev.forward[i].first;
  sums->backward += bwd_end - bwd_start;
  sums->other += next - last_comm;
  ++sums->counted;
  for (const auto& [at, name] : ev.ready) {
    if (at < bwd_start || at >= next) continue;
    auto it = index.find(name);
    if (it == index.end())
      return absl::InvalidArgumentError(
          absl::StrCat("the trace names parameter \"", name, "\", which the model lacks"));
    sums->ready[it->second] += at - bwd_start;
    ++sums->ready_count[it->second];
  }
  return absl::OkStatus();
}

// The step-to-step standard deviation of `values` (one per iteration; `iteration` their indices, ascending)
// estimated from the mean absolute difference of consecutive iterations, times sqrt(pi) / 2 (the standard
// deviation for normal values); 0 without two consecutive ones. For two ranks it makes the straggler wait
// sigma / sqrt(pi) equal E|X1 - X2| / 2, the mean wait itself, whatever the distribution; one stalled step
// moves it far less than it moves the sample standard deviation; and only neighbours are compared, so a
// drift of the machine's speed over minutes, which slows every rank alike and makes none wait for another,
// does not count (a trace of bench/bucket_sweep_interleaved spans minutes).
double JitterFromSuccessiveDifferences(const std::vector<double>& values,
                                       const std::vector<size_t>& iteration) {
  double sum = 0;
  int pairs = 0;
  for (size_t k = 1; k < values.size(); ++k) {
    if (iteration[k] != iteration[k - 1] + 1) continue;
    sum += std::abs(values[k] - values[k - 1]);
    ++pairs;
  }
  return pairs == 0 ? 0.0 : sum / pairs * std::sqrt(M_PI) / 2.0;
}

// Whether iteration i counts under `ranges` (TraceProfileOptions::iterations): no ranges, or one that
// holds both i and i + 1.
bool InRanges(const std::vector<std::pair<int64_t, int64_t>>& ranges, size_t i) {
  if (ranges.empty()) return true;
  const int64_t at = static_cast<int64_t>(i);
  return std::any_of(ranges.begin(), ranges.end(),
                     [at](const auto& r) { return r.first <= at && at + 1 < r.second; });
}

// Whether iteration i was timed under `ranges`: one holds i (without ranges, every iteration counts and
// the timed ones are the counted ones).
bool IsTimed(const std::vector<std::pair<int64_t, int64_t>>& ranges, size_t i) {
  const int64_t at = static_cast<int64_t>(i);
  return std::any_of(ranges.begin(), ranges.end(),
                     [at](const auto& r) { return r.first <= at && at < r.second; });
}

// The jitter of the timed iterations' compute (Note [Profile from a trace]): forward + backward + other,
// with the mean `other` standing in where an iteration's own is unknown. A block of two timed steps thus
// still gives one pair of consecutive iterations; "other" (the optimizer and the loop) varies little.
double TimedJitter(const TimedCompute& timed, double mean_other) {
  std::vector<double> values;
  for (size_t k = 0; k < timed.forward_backward.size(); ++k) {
    values.push_back(timed.forward_backward[k] + timed.other[k].value_or(mean_other));
  }
  return JitterFromSuccessiveDifferences(values, timed.iteration);
}

// The order of the first iteration's grad-ready events (what the bucket rebuild records).
std::vector<size_t> FirstReadyOrder(const RankEvents& ev, const std::map<std::string, size_t>& index) {
  std::vector<size_t> order;
  const double end = ev.forward.size() > 1 ? ev.forward[1].first : 1e300;
  std::vector<bool> seen(index.size(), false);
  for (const auto& [at, name] : ev.ready) {
    auto it = index.find(name);
    if (at < ev.backward[0].first || at >= end || it == index.end() || seen[it->second]) continue;
    order.push_back(it->second);
    seen[it->second] = true;
  }
  for (size_t i = index.size(); i-- > 0;) {  // never ready: reverse registration order, after the rest
    if (!seen[i]) order.push_back(i);
  }
  return order;
}

// The optional fields of a profile JSON: "dtype" (float32 when absent) and "ready_order" (a permutation
// of the parameter indices; by ready time when absent).
absl::StatusOr<ComputeProfile> ProfileOrderAndDtype(const json& in, ComputeProfile profile) {
  const std::string dtype = in.value("dtype", "float32");
  bool known = false;
  for (DType d : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    if (DTypeName(d) == dtype) profile.dtype = d, known = true;
  }
  if (!known) return absl::InvalidArgumentError(absl::StrCat("profile: unknown dtype \"", dtype, "\""));
  if (!in.contains("ready_order")) return profile;
  std::vector<bool> seen(profile.params.size(), false);
  for (const json& i : in["ready_order"]) {
    if (!i.is_number_unsigned() || i.get<size_t>() >= seen.size() || seen[i.get<size_t>()]) {
      return absl::InvalidArgumentError(
          "profile: \"ready_order\" must be a permutation of the parameter indices");
    }
    seen[i.get<size_t>()] = true;
    profile.ready_order.push_back(i.get<size_t>());
  }
  if (!profile.ready_order.empty() && profile.ready_order.size() != seen.size()) {
    return absl::InvalidArgumentError("profile: \"ready_order\" must list every parameter once");
  }
  return profile;
}

}  // namespace

absl::StatusOr<ComputeProfile> ProfileFromTrace(absl::string_view trace_json,
                                                const std::vector<ParameterShape>& params,
                                                const TraceProfileOptions& options) {
  absl::StatusOr<RankEvents> events = CollectEvents(trace_json, options.rank);
  if (!events.ok()) return events.status();
  const size_t first = static_cast<size_t>(std::max(options.skip_iterations, 0));
  const size_t iterations = events->forward.size();
  if (iterations < first + 2) {
    return absl::InvalidArgumentError(absl::StrCat("the trace has ", iterations, " iterations of rank ",
                                                   options.rank, "; need more than ", first + 1,
                                                   " (skip_iterations + 2)"));
  }
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < params.size(); ++i) index[params[i].name] = i;
  Sums sums;
  sums.ready.assign(params.size(), 0);
  sums.ready_count.assign(params.size(), 0);
  TimedCompute timed;
  for (size_t i = first; i < iterations; ++i) {
    const bool counted = i + 1 < iterations && InRanges(options.iterations, i);
    if (!counted && (options.iterations.empty() || !IsTimed(options.iterations, i))) continue;
    const RankEvents& ev = *events;
    timed.forward_backward.push_back((ev.forward[i].second - ev.forward[i].first) +
                                     (ev.backward[i].second - ev.backward[i].first));
    timed.iteration.push_back(i);
    timed.other.push_back(std::nullopt);
    if (!counted) continue;
    const double other_before = sums.other;
    absl::Status added = AddIteration(ev, i, index, &sums);
    if (!added.ok()) return added;
    timed.other.back() = sums.other - other_before;
  }
  if (sums.counted == 0) {
    return absl::InvalidArgumentError(absl::StrCat("no iteration of rank ", options.rank,
                                                   " lies in the given ranges (the trace has ",
                                                   iterations, ")"));
  }
  const double n = static_cast<double>(sums.counted), us = 1e-6;
  ComputeProfile profile;
  profile.forward_s = sums.forward / n * us;
  profile.backward_s = sums.backward / n * us;
  profile.other_s = sums.other / n * us;
  profile.step_jitter_s = TimedJitter(timed, sums.other / n) * us;
  for (size_t i = 0; i < params.size(); ++i) {
    const double ready =
        sums.ready_count[i] > 0 ? sums.ready[i] / sums.ready_count[i] * us : profile.backward_s;
    const auto traced = events->numel.find(params[i].name);
    const int64_t numel = traced != events->numel.end() ? traced->second : params[i].numel;
    profile.params.push_back(ParameterTiming{params[i].name, numel, ready});
  }
  profile.ready_order = FirstReadyOrder(*events, index);
  return profile;
}

absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>> ParseIterationRanges(absl::string_view text) {
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> bounds = absl::StrSplit(item, absl::MaxSplits('-', 1));
    int64_t first = 0, end = 0;
    if (!absl::SimpleAtoi(bounds.first, &first) || !absl::SimpleAtoi(bounds.second, &end) || first < 0 ||
        first >= end) {
      return absl::InvalidArgumentError(
          absl::StrCat("iteration range \"", item, "\" is not FIRST-END with 0 <= FIRST < END"));
    }
    ranges.emplace_back(first, end);
  }
  return ranges;
}

std::string ProfileToJson(const ComputeProfile& profile) {
  json out = {{"forward_ms", 1e3 * profile.forward_s},
              {"backward_ms", 1e3 * profile.backward_s},
              {"other_ms", 1e3 * profile.other_s},
              {"step_jitter_ms", 1e3 * profile.step_jitter_s},
              {"dtype", DTypeName(profile.dtype)},
              {"ready_order", profile.ready_order}};
  json params = json::array();
  for (const ParameterTiming& p : profile.params) {
    params.push_back({{"name", p.name}, {"numel", p.numel}, {"ready_ms", 1e3 * p.ready_s}});
  }
  out["params"] = params;
  return out.dump(1);
}

namespace {
bool FiniteNonNegative(double x) { return std::isfinite(x) && x >= 0; }
}  // namespace

absl::StatusOr<ComputeProfile> ProfileFromJson(absl::string_view text) {
  const json in = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (!in.is_object()) return absl::InvalidArgumentError("a profile must be a JSON object");
  for (const char* key : {"forward_ms", "backward_ms", "other_ms"}) {
    if (!in.contains(key) || !in[key].is_number() || !FiniteNonNegative(in[key].get<double>()))
      return absl::InvalidArgumentError(absl::StrCat("profile: \"", key, "\" must be a finite number >= 0"));
  }
  if (!in.contains("params") || !in["params"].is_array())
    return absl::InvalidArgumentError("profile: \"params\" must be an array");
  ComputeProfile profile;
  profile.forward_s = in["forward_ms"].get<double>() * 1e-3;
  profile.backward_s = in["backward_ms"].get<double>() * 1e-3;
  profile.other_s = in["other_ms"].get<double>() * 1e-3;
  if (in.contains("step_jitter_ms")) {
    if (!in["step_jitter_ms"].is_number() || in["step_jitter_ms"].get<double>() < 0)
      return absl::InvalidArgumentError("profile: \"step_jitter_ms\" must be a number >= 0");
    profile.step_jitter_s = in["step_jitter_ms"].get<double>() * 1e-3;
  }
  for (const json& p : in["params"]) {
    if (!p.is_object() || !p.contains("numel") || !p["numel"].is_number_integer() || p["numel"].get<int64_t>() < 0 ||
        !p.contains("ready_ms") || !p["ready_ms"].is_number() || !FiniteNonNegative(p["ready_ms"].get<double>())) {
      return absl::InvalidArgumentError(
          absl::StrCat("profile: parameter ", profile.params.size(),
                       " needs an integer \"numel\" >= 0 and a number \"ready_ms\" >= 0"));
    }
    profile.params.push_back(ParameterTiming{p.value("name", absl::StrCat("param", profile.params.size())),
                                             p["numel"].get<int64_t>(), p["ready_ms"].get<double>() * 1e-3});
  }
  return ProfileOrderAndDtype(in, std::move(profile));
}

}  // namespace sim
}  // namespace ddp
