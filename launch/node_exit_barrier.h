// Note [Exit barrier]: node 0's ddprun hosts the job's store, and the workers of every node use it until
// they exit; a rank on another node may still be reading it when node 0's own workers have finished.
// So node 0 keeps its store up until every node's ddprun has said that its workers are done, as
// torchrun's agents meet at an exit barrier (exit_barrier_timeout, 300 s) before the one hosting the
// store returns. Only node 0 waits; the others say so and exit. A node that never says so (killed)
// costs node 0 at most the timeout, after which it exits anyway with its own workers' result. Each ddprun
// passes the barrier once, at its end: restarts are node-local, so the nodes' attempt counts may differ.
#ifndef DDP_LAUNCH_NODE_EXIT_BARRIER_H_
#define DDP_LAUNCH_NODE_EXIT_BARRIER_H_

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "launch/worker_env.h"
#include "store/store.h"

namespace ddp {

// How long node 0 waits for the other nodes at the exit barrier (torchrun's exit_barrier_timeout).
inline constexpr absl::Duration kExitBarrierTimeout = absl::Seconds(300);

// Says in `store` that this node's workers are done; the node that completes the count of `nnodes` marks
// the barrier open. Thread-safe as `store` is.
absl::Status ArriveAtExitBarrier(Store& store, int nnodes);

// Arrives (as ArriveAtExitBarrier) and waits until all `nnodes` nodes have arrived, or `timeout`.
// kDeadlineExceeded names how many nodes came.
absl::Status WaitAtExitBarrier(Store& store, int nnodes, absl::Duration timeout);

// The launcher's side of Note [Exit barrier] for the job of `layout`: node 0 waits (up to
// kExitBarrierTimeout), the others arrive. Connects to the job store itself; a job of one node
// does nothing. Returns what went wrong (the caller reports it; the job's result is unchanged).
absl::Status PassExitBarrier(const JobLayout& layout);

}  // namespace ddp

#endif  // DDP_LAUNCH_NODE_EXIT_BARRIER_H_
