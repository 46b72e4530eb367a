// InitProcessGroup: builds the rendezvous store and a process group from an init method, as
// torch.distributed.init_process_group does.
#ifndef DDP_COMM_INIT_H_
#define DDP_COMM_INIT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "store/launch_env.h"
#include "comm/process_group.h"
#include "store/store.h"

namespace ddp {

struct InitOptions {
  std::string backend = "gloo";        // "gloo" (CPU, TCP); "shm" (CPU, ranks of one host); "auto" (shm
                                       // when every rank is on one host, else gloo; gloo also when a
                                       // rank cannot reserve its shared memory, which rank 0 says on
                                       // stderr); "nccl" (--config=cuda); "mpi" (under mpirun/srun: rank
                                       // and size from MPI, no store)
  std::string init_method = "env://";  // env://, tcp://host:port or file:///path
  int rank = -1;                        // -1: from the environment (store/launch_env.h)
  int world_size = -1;                  // -1: from the environment
  std::optional<absl::Duration> timeout;  // nullopt: $DDP_TIMEOUT_S, else 300 s
  EnvLookup env = ProcessEnv();         // tests pass a fake environment
};

// A joined group and the store it rendezvoused through. Destroy the group before the store (the
// member order does); rank 0 may host the TCP store server, so it should be the last to leave.
struct DistributedContext {
  LaunchEnv launch;
  absl::Duration timeout;
  std::unique_ptr<Store> store;  // null for backend "mpi" (MPI does its own rendezvous)
  // The namespace `group` rendezvoused in when it is not `store` itself (an elastic generation's,
  // train/elastic_loop.h); declared before `group`, so that it outlives it.
  std::unique_ptr<Store> group_store;
  std::unique_ptr<ProcessGroup> group;
  // Subgroups NewGroup (comm/new_group.h) created so far: their store prefixes are numbered by it.
  int64_t groups_created = 0;
};

// Joins the group described by `options`. env:// reads MASTER_ADDR/MASTER_PORT, or DDP_STORE_ADDR/
// DDP_STORE_PORT when set (ddprun's and Spawn's store, off the workers' MASTER_PORT: Note [Two ports] in
// launch/worker_env.h); rank 0 starts the TCP store server unless DDP_STORE_IN_LAUNCHER=1 says the
// launcher already runs it; tcp://host:port is the same
// with an explicit address; file:///path uses a FileStore on a shared filesystem. Errors name the bad
// variable, URL or backend, or the peers that did not arrive within the timeout.
absl::StatusOr<std::unique_ptr<DistributedContext>> InitProcessGroup(const InitOptions& options);

// What an elastic replacement (train/elastic_loop.h) needs before it is admitted to a running group:
// `options`' launch environment, timeout and the store namespace InitProcessGroup would join, with no
// group and no rank claim (its RANK is still held by the worker it replaces).
// The group comes later from MakeGroupOverStore. Errors: as InitProcessGroup's for the store.
absl::StatusOr<std::unique_ptr<DistributedContext>> ConnectWithoutGroup(const InitOptions& options);

// A group of `size` ranks of `backend` ("gloo" or "shm") in which this process is `rank`, rendezvousing
// over `store` (a namespace of its own, e.g. a PrefixStore per elastic generation), with `context`'s
// timeout and the same options InitProcessGroup gives that backend (DDP_DEBUG wrapping included). The
// launcher hosts the store: no rank serves it. Errors: another backend (kUnimplemented), the backend's
// own (peers that never arrived within the timeout name themselves).
absl::StatusOr<std::unique_ptr<ProcessGroup>> MakeGroupOverStore(const InitOptions& options,
                                                                 const DistributedContext& context,
                                                                 const std::string& backend, Store& store, int rank,
                                                                 int size);

// The local address of the interface that routes to `host` (what peers on other hosts can reach), or
// "127.0.0.1" when `host` is a loopback address or cannot be resolved.
std::string LocalAddressToward(const std::string& host);

}  // namespace ddp

#endif  // DDP_COMM_INIT_H_
