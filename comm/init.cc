#include "comm/init.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "store/file_store.h"
#include "comm/host_identity.h"
#include "store/job_token.h"
#include "store/prefix_store.h"
#include "store/rank_claim.h"
#include "comm/process_group_debug.h"
#include "comm/gloo/process_group_gloo.h"
#include "comm/mpi/process_group_mpi.h"
#include "comm/hierarchical/process_group_hierarchical.h"
#include "comm/shm/process_group_shm.h"
#include "store/store_exposure.h"
#include "store/store_keys.h"
#include "store/socket_util.h"
#include "store/tcp_store.h"
#ifdef DDP_WITH_CUDA
#include "comm/nccl/process_group_nccl.h"
#endif

namespace ddp {
namespace {

struct HostPort {
  std::string host;
  int port = 0;
};

absl::StatusOr<HostPort> ParseTcpUrl(const std::string& url) {
  const std::string rest = url.substr(6);  // after "tcp://"
  const size_t colon = rest.rfind(':');
  HostPort out;
  if (colon == std::string::npos || colon == 0 || !absl::SimpleAtoi(rest.substr(colon + 1), &out.port) ||
      out.port < 1 || out.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("init method \"", url, "\": expected tcp://host:port"));
  }
  out.host = rest.substr(0, colon);
  return out;
}

// The TCP store at `address`; rank 0 hosts the server unless ddprun does. The server listens on
// MASTER_ADDR itself when this host owns it (loopback stays loopback) and refuses to listen beyond
// loopback without a job token (DDP_JOB_TOKEN or DDP_JOB_TOKEN_FILE; Note [Job tokens]). Every store
// wait, the connection's hello included, is bounded by `timeout` (DDP_TIMEOUT_S).
absl::StatusOr<std::unique_ptr<Store>> MakeTcpStore(const HostPort& address, const LaunchEnv& launch,
                                                    const EnvLookup& env, absl::Duration timeout) {
  TcpStoreOptions store_options;
  store_options.host = address.host;
  store_options.port = address.port;
  store_options.is_server = launch.rank == 0 && !launch.store_in_launcher;
  if (store_options.is_server) store_options.server_bind_host = StoreListenHost(address.host);
  DDP_ASSIGN_OR_RETURN(store_options.job_token, JobTokenFromEnv(env));
  store_options.connect_timeout = timeout;
  store_options.io_timeout = std::min(store_options.io_timeout, timeout);
  DDP_ASSIGN_OR_RETURN(std::unique_ptr<TcpStore> store, TcpStore::Create(store_options));
  return std::unique_ptr<Store>(std::move(store));
}

// The store as the user named it, for errors: "127.0.0.1:29500 (MASTER_ADDR:MASTER_PORT)".
std::string DescribeStore(const InitOptions& options, const LaunchEnv& launch) {
  const std::string& url = options.init_method;
  if (url != "env://") return absl::StrCat("init method ", url);
  const char* names = options.env("DDP_STORE_PORT").has_value() ? "DDP_STORE_ADDR:DDP_STORE_PORT, the launcher's"
                                                                 : "MASTER_ADDR:MASTER_PORT";
  return absl::StrCat(launch.store_addr, ":", launch.store_port, " (", names, ")");
}

absl::StatusOr<std::unique_ptr<Store>> MakeStore(const InitOptions& options, const LaunchEnv& launch,
                                                 absl::Duration timeout) {
  const std::string& url = options.init_method;
  if (url == "env://")
    return MakeTcpStore({launch.store_addr, launch.store_port}, launch, options.env, timeout);
  if (absl::StartsWith(url, "tcp://")) {
    DDP_ASSIGN_OR_RETURN(HostPort address, ParseTcpUrl(url));
    return MakeTcpStore(address, launch, options.env, timeout);
  }
  if (absl::StartsWith(url, "file://")) {
    DDP_ASSIGN_OR_RETURN(std::string path, FileStore::PathFromUrl(url));
    DDP_ASSIGN_OR_RETURN(std::unique_ptr<FileStore> store, FileStore::Create(path));
    return std::unique_ptr<Store>(std::move(store));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown init method \"", url, "\": expected env://, tcp://host:port or file:///path"));
}

// A store that owns its base store and adds a key prefix (the group's namespace).
class OwningPrefixStore : public PrefixStore {
 public:
  OwningPrefixStore(std::string prefix, std::unique_ptr<Store> base)
      : PrefixStore(std::move(prefix), base.get()), base_(std::move(base)) {}

 private:
  std::unique_ptr<Store> base_;
};

}  // namespace

std::string LocalAddressToward(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* result = nullptr;
  if (getaddrinfo(host.c_str(), "9", &hints, &result) != 0 || result == nullptr) return "127.0.0.1";
  std::string local = "127.0.0.1";
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd >= 0 && connect(fd, result->ai_addr, result->ai_addrlen) == 0) {  // UDP: no packet is sent
    sockaddr_in self{};
    socklen_t len = sizeof(self);
    char text[INET_ADDRSTRLEN] = {0};
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&self), &len) == 0 &&
        inet_ntop(AF_INET, &self.sin_addr, text, sizeof(text)) != nullptr) {
      local = text;
    }
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(result);
  return local;
}

namespace {

// `group` itself, or wrapped so that the ranks compare every collective first (DDP_DEBUG=detail).
std::unique_ptr<ProcessGroup> MaybeDebugWrapped(std::unique_ptr<ProcessGroup> group, DebugMode mode) {
  if (mode == DebugMode::kOff) return group;
  return std::make_unique<ProcessGroupDebug>(std::move(group));
}

// The CPU backend for a backend name: auto is shm when every rank reported the same host identity
// through the store (hostname and boot id, comm/host_identity.h); on several hosts with several ranks
// each (the same count everywhere) it is "hier" (Note [Hierarchical all-reduce]), else gloo.
// `identities` receives every rank's identity when they were exchanged.
absl::StatusOr<std::string> ResolveCpuBackend(const InitOptions& options, DistributedContext& context,
                                              std::vector<std::string>* identities) {
  if (options.backend != "auto") return options.backend;
  DDP_ASSIGN_OR_RETURN(*identities,
                       ExchangeHostIdentities(*context.store, context.launch.rank, context.launch.world_size,
                                              LocalHostIdentity(), context.timeout));
  if (AllOnOneHost(*identities)) return std::string("shm");
  const absl::StatusOr<HostLayout> layout = ComputeHostLayout(*identities, context.launch.rank);
  if (!layout.ok()) {
    if (context.launch.rank == 0) std::fprintf(stderr, "backend auto: gloo, since %s\n", layout.status().ToString().c_str());
    return std::string("gloo");
  }
  return std::string(layout->local_size > 1 ? "hier" : "gloo");
}

// The shared-memory group of `rank` of `size` over `store`; $DDP_SHM_NAME_TAG (tests) replaces the
// segment names' tag. Rank 0 says why when zero-copy is off (Note [Zero-copy all-reduce]).
absl::StatusOr<std::unique_ptr<ProcessGroup>> MakeShmGroup(const EnvLookup& env, Store& store, int rank, int size,
                                                           absl::Duration timeout) {
  ProcessGroupShmOptions shm_options;
  shm_options.timeout = timeout;
  shm_options.channel.name_tag = env("DDP_SHM_NAME_TAG").value_or(shm_options.channel.name_tag);
  DDP_ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroupShm> group, ProcessGroupShm::Create(store, rank, size, shm_options));
  if (rank == 0 && !group->zero_copy_off_reason().empty()) {
    std::fprintf(stderr, "ddp: shm: all-reduces stage through copies (no zero-copy buckets): %s\n",
                 group->zero_copy_off_reason().c_str());
  }
  return std::unique_ptr<ProcessGroup>(std::move(group));
}

// The rank whose process serves the job's store (MakeTcpStore's server), -1 when none does: a file store,
// or ddprun's.
int StoreHostRank(const InitOptions& options, const LaunchEnv& launch) {
  if (absl::StartsWith(options.init_method, "file://") || launch.store_in_launcher) return -1;
  return 0;
}

// The Gloo group of `rank` of `size` over `store`; `store_host_rank` as ProcessGroupGlooOptions says.
absl::StatusOr<std::unique_ptr<ProcessGroup>> MakeGlooGroup(const InitOptions& options, const DistributedContext& context,
                                                            Store& store, int rank, int size, int store_host_rank) {
  ProcessGroupGlooOptions gloo_options;
  gloo_options.store_host_rank = store_host_rank;
  gloo_options.timeout = context.timeout;
  DDP_ASSIGN_OR_RETURN(gloo_options.failure_report_window, ResolveFailureReportWindow(options.env));
  gloo_options.hostname =
      options.env("GLOO_SOCKET_IFADDR").value_or(LocalAddressToward(context.launch.master_addr));
  DDP_ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroupGloo> group, ProcessGroupGloo::Create(store, rank, size, gloo_options));
  return std::unique_ptr<ProcessGroup>(std::move(group));
}

// The CPU group `backend` ("gloo", "shm" or "hier") names, for this process's rank of the whole job.
absl::StatusOr<std::unique_ptr<ProcessGroup>> MakeCpuGroup(const InitOptions& options, DistributedContext& context,
                                                           const std::string& backend,
                                                           const std::vector<std::string>& identities) {
  const int rank = context.launch.rank;
  const int size = context.launch.world_size;
  if (backend == "shm") return MakeShmGroup(options.env, *context.store, rank, size, context.timeout);
  if (backend == "gloo") {
    return MakeGlooGroup(options, context, *context.store, rank, size, StoreHostRank(options, context.launch));
  }
  InnerGroupFactory shm = [&](Store& store, int r, int s) {
    return MakeShmGroup(options.env, store, r, s, context.timeout);
  };
  InnerGroupFactory gloo = [&](Store& store, int r, int s) { return MakeGlooGroup(options, context, store, r, s, -1); };
  DDP_ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroupHierarchical> group,
                       ProcessGroupHierarchical::Create(*context.store, rank, size, identities, context.timeout,
                                                        shm, gloo));
  return std::unique_ptr<ProcessGroup>(std::move(group));
}

// Backend "mpi": MPI itself decides rank and size (no store; context->store stays null). Explicit
// rank/world_size arguments must agree with MPI's.
absl::StatusOr<std::unique_ptr<DistributedContext>> JoinMpi(const InitOptions& options, DebugMode debug,
                                                            std::unique_ptr<DistributedContext> context) {
  ProcessGroupMpiOptions mpi_options;
  mpi_options.timeout = context->timeout;
  mpi_options.launch = context->launch;  // refused when MPI disagrees (comm/mpi/mpi_launch_check.h)
  DDP_ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroupMpi> group, ProcessGroupMpi::Create(mpi_options));
  if ((options.rank >= 0 && options.rank != group->rank()) ||
      (options.world_size >= 0 && options.world_size != group->size())) {
    return absl::InvalidArgumentError(absl::StrCat("backend mpi: rank ", options.rank, " of ", options.world_size,
                                                   " requested, but MPI says rank ", group->rank(), " of ",
                                                   group->size()));
  }
  context->launch.rank = group->rank();
  context->launch.world_size = group->size();
  context->launch.local_rank = group->local_rank();
  context->launch.local_world_size = group->local_size();
  context->launch.source = "mpi";
  context->group = MaybeDebugWrapped(std::move(group), debug);
  return context;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ProcessGroup>> MakeGroupOverStore(const InitOptions& options,
                                                                 const DistributedContext& context,
                                                                 const std::string& backend, Store& store, int rank,
                                                                 int size) {
  const std::optional<std::string> debug_env = options.env("DDP_DEBUG");
  DDP_ASSIGN_OR_RETURN(const DebugMode debug, ParseDebugMode(debug_env ? debug_env->c_str() : nullptr));
  absl::StatusOr<std::unique_ptr<ProcessGroup>> group;
  if (backend == "shm") {
    group = MakeShmGroup(options.env, store, rank, size, context.timeout);
  } else if (backend == "gloo") {
    group = MakeGlooGroup(options, context, store, rank, size, /*store_host_rank=*/-1);
  } else {
    return absl::UnimplementedError(absl::StrCat("a group over a store of its own is built for backends gloo and shm, "
                                                 "not ", backend));
  }
  if (!group.ok()) return group.status();
  return MaybeDebugWrapped(*std::move(group), debug);
}

absl::StatusOr<std::unique_ptr<DistributedContext>> InitProcessGroup(const InitOptions& options) {
  IgnoreSigpipeIfDefault();  // before any socket: a dead peer must fail a call, not kill the process
  auto context = std::make_unique<DistributedContext>();
  DDP_ASSIGN_OR_RETURN(context->launch, ResolveLaunchEnv(options.env, options.rank, options.world_size));
  const std::optional<std::string> debug_env = options.env("DDP_DEBUG");
  DDP_ASSIGN_OR_RETURN(const DebugMode debug, ParseDebugMode(debug_env ? debug_env->c_str() : nullptr));
  if (options.timeout.has_value()) {
    context->timeout = *options.timeout;
  } else {
    DDP_ASSIGN_OR_RETURN(context->timeout, ResolveTimeout(options.env));
  }
#ifndef DDP_WITH_CUDA
  if (options.backend == "nccl") {
    return absl::UnimplementedError("backend nccl needs a build with --config=cuda (and a GPU)");
  }
#endif
  if (options.backend == "mpi") return JoinMpi(options, debug, std::move(context));
  if (options.backend != "gloo" && options.backend != "nccl" && options.backend != "shm" &&
      options.backend != "auto") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown backend \"", options.backend, "\": expected auto, gloo, shm, mpi or nccl"));
  }
  DDP_ASSIGN_OR_RETURN(std::unique_ptr<Store> base, MakeStore(options, context->launch, context->timeout));
  // A restarted group (ddprun --max_restarts) meets in a fresh namespace: the store outlives attempts and
  // still holds the previous attempt's rendezvous keys.
  context->store = std::make_unique<OwningPrefixStore>(
      DefaultGroupStorePrefix(absl::StrCat(context->launch.restart_count)), std::move(base));
  // Before this rank writes anything into the job's namespace (Note [Rank claims]).
  DDP_RETURN_IF_ERROR(ClaimRank(*context->store, RankClaim{context->launch.rank, context->launch.job_id,
                                                           DescribeStore(options, context->launch)}));
#ifdef DDP_WITH_CUDA
  if (options.backend == "nccl") {
    ProcessGroupNcclOptions nccl_options;
    nccl_options.timeout = context->timeout;
    nccl_options.device = context->launch.local_rank;  // one rank per GPU
    DDP_ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroupNccl> group,
                         ProcessGroupNccl::Create(*context->store, context->launch.rank,
                                                  context->launch.world_size, nccl_options));
    context->group = MaybeDebugWrapped(std::move(group), debug);
    return context;
  }
#endif
  std::vector<std::string> identities;
  DDP_ASSIGN_OR_RETURN(const std::string backend, ResolveCpuBackend(options, *context, &identities));
  absl::StatusOr<std::unique_ptr<ProcessGroup>> group = MakeCpuGroup(options, *context, backend, identities);
  if (!group.ok() && backend == "shm" && IsShmSegmentUnavailable(group.status())) {
    if (options.backend != "auto") {
      return absl::Status(group.status().code(),
                          absl::StrCat(group.status().message(), " (give /dev/shm more room, e.g. docker run ",
                                       "--shm-size=1g, or use backend auto or gloo)"));
    }
    // Every rank failed so (Note [Segments every rank can reserve] in comm/shm/shm_channel.cc): all fall back.
    if (context->launch.rank == 0) {
      std::fprintf(stderr, "ddp: backend auto: gloo, since shared memory cannot be used: %s\n",
                   std::string(group.status().message()).c_str());
    }
    group = MakeCpuGroup(options, *context, "gloo", identities);
  }
  if (!group.ok()) return group.status();
  context->group = MaybeDebugWrapped(*std::move(group), debug);
  return context;
}

absl::StatusOr<std::unique_ptr<DistributedContext>> ConnectWithoutGroup(const InitOptions& options) {
  IgnoreSigpipeIfDefault();
  auto context = std::make_unique<DistributedContext>();
  DDP_ASSIGN_OR_RETURN(context->launch, ResolveLaunchEnv(options.env, options.rank, options.world_size));
  if (options.timeout.has_value()) {
    context->timeout = *options.timeout;
  } else {
    DDP_ASSIGN_OR_RETURN(context->timeout, ResolveTimeout(options.env));
  }
  DDP_ASSIGN_OR_RETURN(std::unique_ptr<Store> base, MakeStore(options, context->launch, context->timeout));
  context->store = std::make_unique<OwningPrefixStore>(
      DefaultGroupStorePrefix(absl::StrCat(context->launch.restart_count)), std::move(base));
  return context;
}

}  // namespace ddp
