// --bucket_cap_mb=auto: measurement, fit, choice and rebuild (Note [Auto bucket caps] in the header).
#include "train/auto_bucket_caps.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "base/check.h"
#include "base/statistics.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

constexpr double kMiB = 1 << 20;

double Seconds(absl::Time from, absl::Time to) { return absl::ToDoubleSeconds(to - from); }

size_t MiBToBytes(double mib) { return std::isinf(mib) ? SIZE_MAX : static_cast<size_t>(mib * kMiB); }

// The inverse of MiBToBytes (exact: a byte count below 2^53 divided by 2^20).
double BytesToMiB(size_t bytes) {
  return bytes == SIZE_MAX ? std::numeric_limits<double>::infinity() : static_cast<double>(bytes) / kMiB;
}

std::string MiBText(size_t bytes) {
  return bytes == SIZE_MAX ? std::string("inf") : absl::StrCat(static_cast<double>(bytes) / kMiB);
}

// "predicted 1.23 ms/step", or "no prediction" for a reused record that had none (< 0).
std::string PredictedText(double step_s) {
  return step_s < 0 ? std::string("no prediction") : absl::StrFormat("predicted %.2f ms/step", 1e3 * step_s);
}


// The choice as it travels from rank 0: "first_bytes,cap_bytes,predicted_s", or "error:<message>".
std::string ChoiceText(const absl::StatusOr<AutoCapsChoice>& choice) {
  if (!choice.ok()) return absl::StrCat("error:", choice.status().message());
  return absl::StrCat(choice->caps.first_bucket_cap_bytes, ",", choice->caps.bucket_cap_bytes, ",",
                      choice->predicted_step_s);
}

absl::StatusOr<AutoCapsChoice> ParseChoiceText(absl::string_view text) {
  if (absl::ConsumePrefix(&text, "error:")) {
    return absl::FailedPreconditionError(absl::StrCat("--bucket_cap_mb=auto on rank 0: ", text));
  }
  std::vector<absl::string_view> parts = absl::StrSplit(text, ',');
  AutoCapsChoice choice;
  if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &choice.caps.first_bucket_cap_bytes) ||
      !absl::SimpleAtoi(parts[1], &choice.caps.bucket_cap_bytes) ||
      !absl::SimpleAtod(parts[2], &choice.predicted_step_s)) {
    return absl::DataLossError(
        absl::StrCat("--bucket_cap_mb=auto: rank 0 sent a malformed choice \"", text, "\""));
  }
  return choice;
}

}  // namespace

std::vector<BucketCaps> DefaultCapCandidates() {
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> firsts = {0, 0.0625, 0.25, 1, 5, 25};
  const std::vector<double> caps = {0, 0.0625, 0.25, 1, 5, 25, 100, inf};
  std::vector<BucketCaps> out;
  for (double first : firsts) {
    for (double cap : caps) {
      if (first <= cap) out.push_back(BucketCaps{MiBToBytes(first), MiBToBytes(cap)});
    }
  }
  return out;
}

std::string CapsMiBLabel(const BucketCaps& caps) {
  if (caps.first_bucket_cap_bytes == caps.bucket_cap_bytes) return MiBText(caps.bucket_cap_bytes);
  return absl::StrCat(MiBText(caps.first_bucket_cap_bytes), "/", MiBText(caps.bucket_cap_bytes));
}

double MeanStepSeconds(const std::vector<MeasuredIteration>& iterations) {
  double sum = 0;
  int count = 0;
  for (const MeasuredIteration& it : iterations) {
    if (it.step_s < 0) continue;
    sum += it.step_s;
    ++count;
  }
  return count == 0 ? 0 : sum / count;
}

absl::StatusOr<sim::ComputeProfile> ProfileFromIterations(const std::vector<MeasuredIteration>& iterations,
                                                          const std::vector<std::string>& names,
                                                          const std::vector<int64_t>& numels,
                                                          const std::vector<size_t>& ready_order) {
  DDP_CHECK(names.size() == numels.size())
      << "ProfileFromIterations: " << names.size() << " names, " << numels.size() << " sizes";
  sim::ComputeProfile profile;
  std::vector<double> ready_sum(names.size(), 0);
  std::vector<int> ready_count(names.size(), 0);
  int count = 0;
  for (const MeasuredIteration& it : iterations) {
    if (it.step_s < 0) continue;
    ++count;
    profile.forward_s += it.forward_s;
    profile.backward_s += it.backward_s;
    const double exposed = std::max(0.0, it.last_comm_end_s - it.backward_s);
    profile.other_s += std::max(0.0, it.step_s - it.forward_s - it.backward_s - exposed);
    for (size_t p = 0; p < names.size() && p < it.ready_s.size(); ++p) {
      if (it.ready_s[p] < 0) continue;
      ready_sum[p] += it.ready_s[p];
      ++ready_count[p];
    }
  }
  if (count == 0) {
    return absl::FailedPreconditionError("--bucket_cap_mb=auto: no measured iteration with a step time");
  }
  profile.forward_s /= count;
  profile.backward_s /= count;
  profile.other_s /= count;
  for (size_t p = 0; p < names.size(); ++p) {
    // A parameter that never got a gradient is taken as ready at the end of backward.
    const double ready = ready_count[p] > 0 ? ready_sum[p] / ready_count[p] : profile.backward_s;
    profile.params.push_back({names[p], numels[p], ready});
  }
  profile.ready_order = ready_order;
  return profile;
}

absl::StatusOr<AutoCapsChoice> ChooseAutoCaps(const sim::ComputeProfile& profile,
                                              const std::vector<sim::Sample>& samples, int world_size,
                                              const BucketCaps& current_caps, double measured_step_s,
                                              bool rebuild_buckets, const std::vector<BucketCaps>& candidates,
                                              double min_predicted_gain) {
  DDP_CHECK(world_size >= 2 && !candidates.empty()) << "ChooseAutoCaps needs >= 2 ranks and candidates";
  AutoCapsChoice choice;
  DDP_ASSIGN_OR_RETURN(choice.link_fit, sim::FitLine(samples));
  sim::SimOptions options;
  options.rebuild_buckets = rebuild_buckets;
  options.cluster.world_size = world_size;
  options.cluster.intra = sim::LinkFromRingFit(choice.link_fit, world_size);
  // The contention that makes the caps that ran predict the step time they measured.
  options.caps = current_caps;
  double best_error = std::numeric_limits<double>::infinity();
  for (double lost : {0.0, 0.25, 0.5, 0.75, 1.0}) {
    options.compute_lost_to_comm = lost;
    const double predicted = sim::SimulateStep(profile, options).step_s;
    if (std::abs(predicted - measured_step_s) < best_error) {
      best_error = std::abs(predicted - measured_step_s);
      choice.compute_lost_to_comm = lost;
      choice.current_predicted_step_s = predicted;
    }
  }
  options.compute_lost_to_comm = choice.compute_lost_to_comm;
  std::vector<BucketCaps> tried = {current_caps};  // first: a tie keeps the buckets that ran
  tried.insert(tried.end(), candidates.begin(), candidates.end());
  const sim::CapChoice best = sim::ChooseCaps(profile, options, tried);
  // A saving smaller than the model's own error (Note [Auto bucket caps]) is no reason to change.
  const bool worth_it = best.prediction.step_s < (1 - min_predicted_gain) * choice.current_predicted_step_s;
  choice.caps = worth_it ? best.caps : current_caps;
  choice.predicted_step_s = worth_it ? best.prediction.step_s : choice.current_predicted_step_s;
  choice.current_caps = current_caps;
  choice.current_measured_step_s = measured_step_s;
  return choice;
}

// ---- The controller ----

AutoBucketCaps::AutoBucketCaps(DistributedDataParallel& ddp, AutoBucketCapsOptions options, FILE* out)
    : ddp_(ddp), options_(std::move(options)), out_(out) {
  if (options_.candidates.empty()) options_.candidates = DefaultCapCandidates();
  for (const auto& [name, param] : ddp_.module().NamedParameters()) {  // the Reducer's order (DDP's Create)
    names_.push_back(name);
    numels_.push_back(param.numel());
  }
  ready_at_.assign(names_.size(), absl::InfinitePast());
  last_comm_end_ = absl::InfinitePast();
}

std::unique_ptr<AutoBucketCaps> AutoBucketCaps::Attach(DistributedDataParallel& ddp,
                                                       AutoBucketCapsOptions options, FILE* out) {
  DDP_CHECK(options.skip_iterations >= 0 && options.measure_steps >= 1 && options.report_steps >= 1 &&
            options.probe_repeats >= 1)
      << "AutoBucketCaps: bad counts";
  std::unique_ptr<AutoBucketCaps> controller(new AutoBucketCaps(ddp, std::move(options), out));
  ddp.AddReducerObserver(controller.get());
  return controller;
}

void AutoBucketCaps::OnGradientReady(const GradientReadyEvent& event) {
  if (event.param < ready_at_.size()) ready_at_[event.param] = event.at;
}

void AutoBucketCaps::OnBucketDone(const BucketDoneEvent& event) {
  // A backend that does not time its works (InfinitePast) leaves the fit to the probes.
  if (event.start == absl::InfinitePast() || event.end == absl::InfinitePast()) return;
  bucket_samples_.push_back({static_cast<double>(event.bytes), Seconds(event.start, event.end)});
  last_comm_end_ = std::max(last_comm_end_, event.end);
}

void AutoBucketCaps::OnIterationEnd(const IterationEndEvent& event) {
  ++iterations_seen_;
  // The previous kept iteration's step ends where this one's forward starts.
  std::vector<MeasuredIteration>& list = chosen_ ? after_ : measured_;
  if (have_last_ && !list.empty() && list.back().step_s < 0) {
    list.back().step_s = Seconds(last_forward_start_, event.forward_start);
  }
  const bool keep = chosen_ ? event.iteration > chosen_at_iteration_ &&
                                  static_cast<int>(after_.size()) < options_.report_steps + 1
                            : event.iteration >= options_.skip_iterations &&
                                  static_cast<int>(measured_.size()) < options_.measure_steps + 1;
  if (keep) {
    MeasuredIteration it;
    it.forward_s = Seconds(event.forward_start, event.backward_start);
    it.backward_s = Seconds(event.backward_start, event.backward_end);
    for (absl::Time at : ready_at_) {
      it.ready_s.push_back(at == absl::InfinitePast() ? -1.0 : Seconds(event.backward_start, at));
    }
    it.buckets = bucket_samples_;
    it.last_comm_end_s = bucket_samples_.empty() ? 0 : Seconds(event.backward_start, last_comm_end_);
    list.push_back(std::move(it));
    last_forward_start_ = event.forward_start;
    have_last_ = true;
  } else {
    have_last_ = false;
  }
  ready_at_.assign(names_.size(), absl::InfinitePast());
  bucket_samples_.clear();
  last_comm_end_ = absl::InfinitePast();
}

absl::Status AutoBucketCaps::AfterStep() {
  ++steps_;
  if (!chosen_ && static_cast<int>(measured_.size()) >= options_.measure_steps + 1) return Choose();
  if (chosen_ && measured_after_s_ < 0 && static_cast<int>(after_.size()) >= options_.report_steps + 1)
    Report();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<sim::Sample>> AutoBucketCaps::ProbeLink() {
  ProcessGroup& group = ddp_.group();
  std::vector<sim::Sample> samples;
  for (int64_t bytes : options_.probe_bytes) {
    Tensor buffer = Tensor::Empty({std::max<int64_t>(1, bytes / 4)}, DType::kFloat32);
    FillInPlace(buffer, 0.0f);
    std::vector<double> seconds;
    for (int r = 0; r < options_.probe_repeats; ++r) {
      const absl::Time start = absl::Now();
      absl::Status status = group.AllReduce(buffer, ReduceOp::kSum)->Wait(group.timeout());
      if (!status.ok()) {
        return absl::Status(status.code(), absl::StrCat("--bucket_cap_mb=auto: probe all-reduce of ", bytes,
                                                        " B: ", status.message()));
      }
      seconds.push_back(Seconds(start, absl::Now()));
    }
    samples.push_back({static_cast<double>(buffer.nbytes()), Median(seconds)});
  }
  return samples;
}

absl::Status AutoBucketCaps::Choose() {
  ProcessGroup& group = ddp_.group();
  DDP_ASSIGN_OR_RETURN(std::vector<sim::Sample> samples, ProbeLink());  // collective: every rank
  std::string text;
  if (group.rank() == 0) {
    const Reducer& reducer = ddp_.reducer();
    std::vector<size_t> order;
    if (reducer.buckets_rebuilt()) {
      absl::StatusOr<std::vector<size_t>> parsed =
          ParseGradientOrder(reducer.RebuiltOrderText(), names_.size());
      if (parsed.ok()) order = *parsed;
    }
    absl::StatusOr<AutoCapsChoice> choice;
    absl::StatusOr<sim::ComputeProfile> profile = ProfileFromIterations(measured_, names_, numels_, order);
    if (profile.ok()) {
      choice = ChooseAutoCaps(*profile, samples, group.size(), reducer.caps(), MeanStepSeconds(measured_),
                              reducer.buckets_rebuilt(), options_.candidates, options_.min_predicted_gain);
    } else {
      choice = profile.status();
    }
    if (choice.ok()) choice_ = *choice;
    text = ChoiceText(choice);
  }
  DDP_RETURN_IF_ERROR(group.BroadcastObject(&text, 0));
  DDP_ASSIGN_OR_RETURN(AutoCapsChoice agreed, ParseChoiceText(text));
  if (group.rank() != 0) choice_ = agreed;
  ApplyChoice(agreed.caps);
  if (group.rank() == 0 && out_ != nullptr) {
    const double ms = 1e3;
    std::fprintf(out_,
                 "auto bucket caps: first %s MiB, cap %s MiB, %d buckets (predicted %.2f ms/step); measured "
                 "over %d steps under %s MiB: %.2f ms/step (simulated %.2f); link %.1f us + %.3f GB/s (fit "
                 "median error %.1f%%), compute lost to communication %.2f\n",
                 MiBText(agreed.caps.first_bucket_cap_bytes).c_str(),
                 MiBText(agreed.caps.bucket_cap_bytes).c_str(),
                 static_cast<int>(ddp_.reducer().bucket_assignment().size()), ms * choice_.predicted_step_s,
                 options_.measure_steps, CapsMiBLabel(choice_.current_caps).c_str(),
                 ms * choice_.current_measured_step_s, ms * choice_.current_predicted_step_s,
                 1e6 * choice_.link_fit.alpha_s,
                 choice_.link_fit.beta_s_per_byte > 0 ? 1e-9 / choice_.link_fit.beta_s_per_byte : 0.0,
                 100 * choice_.link_fit.median_relative_error, choice_.compute_lost_to_comm);
    std::fflush(out_);
  }
  return absl::OkStatus();
}

void AutoBucketCaps::ApplyChoice(const BucketCaps& caps) {
  const BucketCaps& current = ddp_.reducer().caps();
  if (caps.first_bucket_cap_bytes != current.first_bucket_cap_bytes ||
      caps.bucket_cap_bytes != current.bucket_cap_bytes) {
    ddp_.Rebucket(caps);
  }
  chosen_ = true;
  chosen_at_iteration_ = iterations_seen_;  // the next iteration (index iterations_seen_) is left out
  have_last_ = false;
}

absl::Status AutoBucketCaps::ResumeFrom(const std::optional<AutoBucketCapsRecord>& saved, const std::string& source) {
  ProcessGroup& group = ddp_.group();
  std::string text;  // rank 0's decision: the caps to reuse as ChoiceText, or "" to measure
  if (group.rank() == 0 && saved.has_value()) {
    const BucketCaps caps{MiBToBytes(saved->first_bucket_cap_mib), MiBToBytes(saved->bucket_cap_mib)};
    if (saved->world_size == group.size() && saved->backend == group.backend_name()) {
      AutoCapsChoice reused;
      reused.caps = caps;
      reused.predicted_step_s = saved->predicted_step_s;
      text = ChoiceText(reused);
    } else if (out_ != nullptr) {
      std::fprintf(out_,
                   "auto bucket caps: the choice in %s (first %s MiB, cap %s MiB) was made for %d ranks over %s, "
                   "this run has %d ranks over %s: measuring and choosing again\n",
                   source.c_str(), MiBText(caps.first_bucket_cap_bytes).c_str(), MiBText(caps.bucket_cap_bytes).c_str(),
                   saved->world_size, saved->backend.c_str(), group.size(), group.backend_name().c_str());
      std::fflush(out_);
    }
  }
  DDP_RETURN_IF_ERROR(group.BroadcastObject(&text, 0));
  if (text.empty()) return absl::OkStatus();
  DDP_ASSIGN_OR_RETURN(const AutoCapsChoice agreed, ParseChoiceText(text));
  choice_ = agreed;
  choice_.current_caps = ddp_.reducer().caps();
  if (group.rank() == 0) {
    choice_.predicted_step_s = saved->predicted_step_s;  // exact, not the broadcast's rounding
    resumed_measured_s_ = saved->measured_step_s;
  }
  ApplyChoice(agreed.caps);
  if (group.rank() == 0 && out_ != nullptr) {
    std::fprintf(out_,
                 "auto bucket caps: reusing the choice from %s: first %s MiB, cap %s MiB, %d buckets (chosen for "
                 "%d ranks over %s; %s), not measuring again\n",
                 source.c_str(), MiBText(agreed.caps.first_bucket_cap_bytes).c_str(),
                 MiBText(agreed.caps.bucket_cap_bytes).c_str(),
                 static_cast<int>(ddp_.reducer().bucket_assignment().size()), group.size(),
                 group.backend_name().c_str(), PredictedText(choice_.predicted_step_s).c_str());
    std::fflush(out_);
  }
  return absl::OkStatus();
}

std::optional<AutoBucketCapsRecord> AutoBucketCaps::Record() const {
  if (!chosen_) return std::nullopt;
  AutoBucketCapsRecord record;
  record.first_bucket_cap_mib = BytesToMiB(choice_.caps.first_bucket_cap_bytes);
  record.bucket_cap_mib = BytesToMiB(choice_.caps.bucket_cap_bytes);
  record.world_size = ddp_.group().size();
  record.backend = ddp_.group().backend_name();
  record.predicted_step_s = choice_.predicted_step_s;
  record.measured_step_s = measured_after_s_ >= 0 ? measured_after_s_ : resumed_measured_s_;
  return record;
}

void AutoBucketCaps::Report() {
  measured_after_s_ = MeanStepSeconds(after_);
  if (ddp_.group().rank() != 0 || out_ == nullptr) return;
  std::fprintf(
      out_, "auto bucket caps: measured %.2f ms/step over the next %d steps under %s MiB (%s)\n",
      1e3 * measured_after_s_, options_.report_steps, CapsMiBLabel(choice_.caps).c_str(),
      PredictedText(choice_.predicted_step_s).c_str());
  std::fflush(out_);
}

}  // namespace ddp
