// Note [Device backward time]
// On a GPU the host runs ahead of the device: loss.Backward() returns once every kernel was enqueued,
// so the Reducer's host intervals (IterationEndEvent) say when work was queued. DeviceBackwardTimer puts
// events into the training thread's current stream, the stream the backward kernels and the Reducer's
// bucket copies run on (Note [Current stream] in tensor/cuda/context.h):
//   start       MarkBackwardStart, before loss.Backward(): every forward kernel was enqueued before it.
//   last_ready  re-recorded at every OnGradientReady, after the gradient's copy into its bucket was
//               enqueued; the last one stands, so start -> last_ready is backward's compute on the device
//               (the device analogue of IterationStats::backward_compute_s).
//   synced      OnIterationEnd: the Reducer made this stream wait for the buckets' reductions and wrote
//               the averaged gradients back, so start -> synced adds the communication backward did not
//               hide.
// Recording an event costs a few microseconds of host time and never blocks; the figures are read once
// the events completed (queried at each iteration end, or waited for by Flush), so timing adds no
// synchronisation to the training loop. Events return to a pool after use.
#include "ddp/device_backward_timer.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/check.h"
#include "base/statistics.h"

namespace ddp {
namespace {

double Mean(const std::vector<double>& values) {
  double sum = 0;
  for (double v : values) sum += v;
  return values.empty() ? 0 : sum / values.size();
}

}  // namespace

DeviceBackwardTimer::DeviceBackwardTimer(std::unique_ptr<DeviceEvents> events) : events_(std::move(events)) {
  DDP_CHECK(events_ != nullptr) << "DeviceBackwardTimer needs device events";
}

DeviceBackwardTimer::~DeviceBackwardTimer() {
  std::vector<Event> events = free_events_;
  events.insert(events.end(), {start_, last_ready_});
  for (const Pending& p : pending_) events.insert(events.end(), {p.start, p.last_ready, p.synced});
  for (Event e : events) {
    if (e != nullptr) events_->Destroy(e);
  }
}

void DeviceBackwardTimer::Fail(const absl::Status& status) {
  if (status_.ok()) status_ = status;
}

DeviceEvents::Event DeviceBackwardTimer::TakeEvent() {
  if (!status_.ok()) return nullptr;
  if (!free_events_.empty()) {
    Event event = free_events_.back();
    free_events_.pop_back();
    return event;
  }
  absl::StatusOr<Event> created = events_->Create();
  if (!created.ok()) {
    Fail(created.status());
    return nullptr;
  }
  ++events_created_;
  return *created;
}

void DeviceBackwardTimer::Record(Event event) {
  if (event == nullptr || !status_.ok()) return;
  Fail(events_->Record(event));
}

void DeviceBackwardTimer::MarkBackwardStart() {
  if (start_ == nullptr) start_ = TakeEvent();
  Record(start_);
}

void DeviceBackwardTimer::OnGradientReady(const GradientReadyEvent& /*event*/) {
  if (start_ == nullptr) return;  // not timed
  if (last_ready_ == nullptr) last_ready_ = TakeEvent();
  Record(last_ready_);
}

void DeviceBackwardTimer::OnIterationEnd(const IterationEndEvent& event) {
  Event synced = start_ != nullptr && last_ready_ != nullptr ? TakeEvent() : nullptr;
  Record(synced);
  if (synced != nullptr && status_.ok()) {
    pending_.push_back({start_, last_ready_, synced, event.iteration,
                        absl::ToDoubleSeconds(event.backward_end - event.backward_start)});
  } else {  // not timed (no mark, no gradient) or failed: the events go back to the pool
    for (Event e : {start_, last_ready_, synced}) {
      if (e != nullptr) free_events_.push_back(e);
    }
  }
  start_ = last_ready_ = nullptr;
  ResolveCompleted();
}

bool DeviceBackwardTimer::ResolveCompleted() {
  while (!pending_.empty() && status_.ok()) {
    const Pending& p = pending_.front();
    const absl::StatusOr<bool> done = events_->Completed(p.synced);  // the last of the three on the stream
    if (!done.ok()) Fail(done.status());
    if (!done.ok() || !*done) return false;
    const absl::StatusOr<double> compute = events_->ElapsedSeconds(p.start, p.last_ready);
    const absl::StatusOr<double> synced = events_->ElapsedSeconds(p.start, p.synced);
    if (!compute.ok() || !synced.ok()) {
      Fail(compute.ok() ? synced.status() : compute.status());
      return false;
    }
    history_.push_back({p.iteration, *compute, *synced, p.host_backward_compute_s});
    free_events_.insert(free_events_.end(), {p.start, p.last_ready, p.synced});
    pending_.pop_front();
  }
  return pending_.empty();
}

absl::Status DeviceBackwardTimer::Flush(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!ResolveCompleted()) {
    if (!status_.ok()) return status_;
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "DeviceBackwardTimer: ", pending_.size(), " timed iterations (from iteration ", pending_.front().iteration,
          ") did not finish on ", events_->device_name(), " within ", absl::FormatDuration(timeout)));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return status_;
}

std::string FormatDeviceBackwardStats(const std::vector<DeviceBackwardStats>& history, int warmup) {
  if (history.empty()) return "";
  const size_t skip = history.size() > static_cast<size_t>(warmup) ? warmup : 0;
  std::vector<double> compute, synced, host;
  for (size_t i = skip; i < history.size(); ++i) {
    compute.push_back(history[i].backward_compute_s * 1e3);
    synced.push_back(history[i].backward_synced_s * 1e3);
    host.push_back(history[i].host_backward_compute_s * 1e3);
  }
  return absl::StrFormat(
      "device backward ms over %d iterations: compute mean %.3f p90 %.3f, synced mean %.3f p90 %.3f; "
      "host backward compute mean %.3f\n",
      compute.size(), Mean(compute), Percentile(compute, 0.9), Mean(synced), Percentile(synced, 0.9), Mean(host));
}

}  // namespace ddp
