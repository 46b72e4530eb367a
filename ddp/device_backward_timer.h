// DeviceBackwardTimer: the device-side duration of DDP's backward pass, from device events, because the
// Reducer's statistics (reducer/iteration_stats.h) read the host clock, which on a GPU measures when
// kernels were enqueued, not when they ran. Note [Device backward time] in device_backward_timer.cc says
// what each figure spans. Nothing here knows CUDA: the events are a DeviceEvents interface, so the logic
// is tested on the CPU with a fake (device_backward_timer_test.cc); ddp/cuda_backward_timer.h makes the
// CUDA one (--config=cuda):
//
//   auto timer = MakeCudaBackwardTimer(Device::CUDA(0)).value();
//   (*ddp)->AddReducerObserver(timer.get());         // timer outlives the DDP module
//   Tensor loss = CrossEntropy((*ddp)->Forward(x), y);
//   timer->MarkBackwardStart();                       // right before backward, on the training thread
//   loss.Backward();
//   ...
//   DDP_CHECK(timer->Flush(absl::Seconds(60)).ok());  // at the end: resolve the last iterations
//   std::printf("%s", FormatDeviceBackwardStats(timer->history()).c_str());
#ifndef DDP_DDP_DEVICE_BACKWARD_TIMER_H_
#define DDP_DDP_DEVICE_BACKWARD_TIMER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "reducer/reducer_observer.h"

namespace ddp {

// One synchronised iteration's backward, timed on the device, beside the Reducer's host figure.
struct DeviceBackwardStats {
  int64_t iteration = 0;               // IterationEndEvent::iteration
  double backward_compute_s = 0;       // device: MarkBackwardStart -> the last gradient copied to its bucket
  double backward_synced_s = 0;        // device: MarkBackwardStart -> averaged gradients in .grad (adds the
                                       // communication backward did not hide)
  double host_backward_compute_s = 0;  // host: IterationEndEvent's backward_end - backward_start
};

// Timing events of one device, recorded in the order of one stream (CUDA events on the training thread's
// current stream: ddp/cuda_backward_timer.cc). Handles are opaque and non-null. Called on one thread.
class DeviceEvents {
 public:
  using Event = void*;
  virtual ~DeviceEvents() = default;
  // A new event, owned by the caller until Destroy.
  virtual absl::StatusOr<Event> Create() = 0;
  // Marks the point the stream has reached (re-recording moves it).
  virtual absl::Status Record(Event event) = 0;
  // Whether the stream passed the point last recorded.
  virtual absl::StatusOr<bool> Completed(Event event) = 0;
  // Seconds between two completed events.
  virtual absl::StatusOr<double> ElapsedSeconds(Event from, Event to) = 0;
  virtual void Destroy(Event event) = 0;
  // The device, for messages ("cuda:0").
  virtual std::string device_name() const = 0;
};

// A Reducer observer (Note [Reducer observers]) that records device events at MarkBackwardStart, at every
// gradient that reached its bucket (the last one stands), and at the end of each synchronised iteration.
// Iterations are resolved without blocking once their events completed (checked at each iteration end),
// or by Flush. An iteration without a MarkBackwardStart since the previous one is not timed. Events are
// pooled (about three per iteration in flight). Not thread-safe: the training thread calls everything.
// A failing event call stops the timing; status() returns the failure.
class DeviceBackwardTimer : public ReducerObserver {
 public:
  // REQUIRES: events != nullptr.
  explicit DeviceBackwardTimer(std::unique_ptr<DeviceEvents> events);
  // Destroys the events (pending iterations are dropped).
  ~DeviceBackwardTimer() override;
  DeviceBackwardTimer(const DeviceBackwardTimer&) = delete;
  DeviceBackwardTimer& operator=(const DeviceBackwardTimer&) = delete;

  // Records the start of the next backward pass. Call after the loss was computed, right before
  // loss.Backward(). A second call before the iteration ended moves the start.
  void MarkBackwardStart();

  void OnGradientReady(const GradientReadyEvent& event) override;
  void OnIterationEnd(const IterationEndEvent& event) override;

  // Waits (polling, at most `timeout`) until every timed iteration's events completed and moves them into
  // history(). Errors: DeadlineExceeded naming the pending iterations and the device; status() when an
  // event call failed.
  absl::Status Flush(absl::Duration timeout);

  // The resolved iterations, oldest first.
  const std::vector<DeviceBackwardStats>& history() const { return history_; }
  // OK unless an event call failed (then the timer stopped timing).
  const absl::Status& status() const { return status_; }
  // Events created so far (the pool's size; for tests).
  int events_created() const { return events_created_; }

 private:
  using Event = DeviceEvents::Event;
  // One ended, timed iteration whose events may not have completed yet.
  struct Pending {
    Event start = nullptr;
    Event last_ready = nullptr;
    Event synced = nullptr;
    int64_t iteration = 0;
    double host_backward_compute_s = 0;
  };
  // An event from the pool (created when the pool is empty), or null once status_ failed.
  Event TakeEvent();
  // Records `event`; keeps the first failure in status_.
  void Record(Event event);
  // Moves the oldest pending iterations whose events completed into history_, in order. Returns whether
  // none is left pending.
  bool ResolveCompleted();
  // Keeps the first failure.
  void Fail(const absl::Status& status);

  std::unique_ptr<DeviceEvents> events_;
  std::vector<Event> free_events_;
  int events_created_ = 0;
  Event start_ = nullptr;       // the open iteration's start (set by MarkBackwardStart)
  Event last_ready_ = nullptr;  // the open iteration's last gradient-ready event
  std::deque<Pending> pending_;
  std::vector<DeviceBackwardStats> history_;
  absl::Status status_;
};

// "device backward ms over N iterations: compute mean M p90 P, synced mean M p90 P; host backward
// compute mean M" over `history` (skipping the first `warmup` iterations when more remain); "" for an
// empty history.
std::string FormatDeviceBackwardStats(const std::vector<DeviceBackwardStats>& history, int warmup = 1);

}  // namespace ddp

#endif  // DDP_DDP_DEVICE_BACKWARD_TIMER_H_
