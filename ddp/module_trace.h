// ModuleTracer: per-module slices in the Chrome trace, "forward <path>" and "backward <path>" named by
// the module's dotted path ("fc1", "features.conv2"), on the modules track of the rank's trace and on
// the Reducer's clock (absl::Now()), so that the "grad ready" and "launch bucket" instants and the bucket
// spans line up with the layer whose gradient closed each bucket. Opt-in: train/train builds one only
// with --trace_out, and without a tracer nothing is measured (Note [Module call observer] in
// nn/module.h). See Note [Module trace slices] in module_trace.cc for what the backward slice spans.
//
//   auto ddp = DistributedDataParallel::Create(model, group, options);  // options.reducer.record_trace
//   ModuleTracer tracer(*model, group->rank());
//   ... train ...
//   WriteMergedTrace({&(*ddp)->reducer().trace(), &tracer.trace()}, *group, "trace.json");
#ifndef DDP_DDP_MODULE_TRACE_H_
#define DDP_DDP_MODULE_TRACE_H_

#include <memory>
#include <vector>

#include "nn/module.h"
#include "reducer/trace.h"

namespace ddp {

// Records the calls, made on the constructing thread through Module::operator() (Sequential calls its
// children that way), of `root`'s descendants, and their backward passes. Installs itself as that
// thread's module call observer; the destructor restores the previous one and removes its gradient
// hooks. Not thread-safe: constructed, used and destroyed on the training thread. Autograd nodes it put
// into graphs hold only a weak reference, so graphs may outlive it.
class ModuleTracer {
 public:
  // `root` (not owned) must outlive the tracer and keep its structure (no ReplaceChild after this);
  // `rank` names the trace's process. Registers a post-accumulate-grad hook on every parameter.
  ModuleTracer(const Module& root, int rank);
  ~ModuleTracer();
  ModuleTracer(const ModuleTracer&) = delete;
  ModuleTracer& operator=(const ModuleTracer&) = delete;

  // The slices so far (TraceRecorder::kModuleTrack), for WriteMergedTrace.
  const TraceRecorder& trace() const;

  struct State;  // shared with the autograd nodes and hooks (module_trace.cc)

 private:
  std::shared_ptr<State> state_;
  std::unique_ptr<ModuleCallObserver> observer_;
  ModuleCallObserver* previous_observer_;
  std::vector<std::pair<Tensor, int>> hooks_;  // parameter, hook id
};

}  // namespace ddp

#endif  // DDP_DDP_MODULE_TRACE_H_
