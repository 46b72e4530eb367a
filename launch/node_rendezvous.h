// How the nodes of a --rdzv_backend=c10d job meet: one round of torchrun's dynamic rendezvous, run in
// the store that the node owning --rdzv_endpoint hosts. That node becomes node 0; the others get node
// ranks 1, 2, ... in the order they join. Pure over a Store, so it is tested with nodes as threads.
#ifndef DDP_LAUNCH_NODE_RENDEZVOUS_H_
#define DDP_LAUNCH_NODE_RENDEZVOUS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "store/store.h"

namespace ddp {

// One node's view of the rendezvous.
struct NodeRendezvousOptions {
  // This node hosts the store: it is node 0, waits for the others, closes the rendezvous and publishes
  // the result (what follows from here to join_timeout is the host's to decide).
  bool is_host = false;
  // The rendezvous completes once min_nodes have joined and then either max_nodes have, or
  // last_call_timeout has passed since min_nodes was reached (torchrun's --nnodes=MIN:MAX).
  int min_nodes = 1;
  int max_nodes = 1;
  // Workers on this node; every node must have the same number (ranks are node_rank * nproc + local).
  int nproc_per_node = 1;
  // --rdzv_id: nodes of another job at the same endpoint are refused, naming both ids.
  std::string run_id = "none";
  // How long a node waits for min_nodes (the host) or for the result (the others).
  absl::Duration join_timeout = absl::Seconds(600);
  absl::Duration last_call_timeout = absl::Seconds(30);
  // Host only: what it decides for the whole job.
  std::string master_addr;     // the workers' MASTER_ADDR
  int worker_master_port = 0;  // the workers' MASTER_PORT (Note [Two ports] in launch/worker_env.h)
  std::string job_id;          // DDP_JOB_ID
};

// What the rendezvous decided.
struct NodeAssignment {
  int node_rank = 0;
  int nnodes = 1;
  std::string master_addr;
  int worker_master_port = 0;
  std::string job_id;
};

// Joins the rendezvous in `store` (keys under "ddprun/rdzv/"). Errors: kDeadlineExceeded when fewer than
// min_nodes joined within join_timeout (host) or no result came (others), naming how many joined;
// kFailedPrecondition for another --rdzv_id at the endpoint, a node that arrives after the rendezvous
// closed or beyond max_nodes, or nodes with different --nproc_per_node (every node gets that error).
// Blocks at most join_timeout + last_call_timeout. Thread-safe as far as `store` is.
absl::StatusOr<NodeAssignment> JoinNodeRendezvous(Store& store, const NodeRendezvousOptions& options);

}  // namespace ddp

#endif  // DDP_LAUNCH_NODE_RENDEZVOUS_H_
