#include "launch/launcher.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "store/job_token.h"
#include "absl/strings/numbers.h"
#include "store/socket_util.h"
#include "store/store_exposure.h"
#include "store/store_keys.h"
#include "store/tcp_store_client.h"
#include "store/tcp_store_server.h"
#include "launch/job_control.h"
#include "launch/node_exit_barrier.h"
#include "launch/node_rendezvous.h"
#include "launch/worker_logs.h"
#include "launch/worker_group.h"
#include "base/check.h"

namespace ddp {
namespace {

void Say(absl::string_view message) { WriteFully(2, absl::StrCat("ddprun: ", message, "\n")); }

// How long a node other than 0 waits for node 0's store and its word on MASTER_PORT (torchrun's join
// timeout), and for the job token file node 0 creates.
constexpr absl::Duration kNodeJoinTimeout = absl::Seconds(900);

// The token in `path`: node 0 creates the file when missing; the other nodes wait for it to appear.
absl::StatusOr<std::string> TokenFromFile(bool creates, const std::string& path) {
  if (creates) return CreateOrReadJobTokenFile(path);
  const absl::Time deadline = absl::Now() + kNodeJoinTimeout;
  bool said = false;
  while (::access(path.c_str(), F_OK) != 0) {
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("the job token file ", path, " did not appear within ",
                                                      absl::FormatDuration(kNodeJoinTimeout),
                                                      " (node 0's ddprun creates it)"));
    }
    if (!said) Say(absl::StrCat("waiting for node 0 to create the job token file ", path));
    said = true;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return ReadJobTokenFile(path);
}

// The job token (Note [Job tokens] in store/job_token.cc): --job_token, --job_token_file, then
// DDP_JOB_TOKEN / DDP_JOB_TOKEN_FILE, then a fresh one for a single-node job. A multi-node job without
// one is refused: its store listens beyond loopback.
// `hosts_store`: this node hosts the store (node 0 of a static job; the endpoint's owner under c10d),
// and creates the token file when it is missing.
absl::StatusOr<std::string> ChooseJobToken(const LaunchOptions& options, bool hosts_store) {
  if (!options.job_token.empty()) return options.job_token;
  if (!options.job_token_file.empty()) {
    absl::StatusOr<std::string> token = TokenFromFile(hosts_store, options.job_token_file);
    if (!token.ok()) {
      return absl::Status(token.status().code(), absl::StrCat("--job_token_file: ", token.status().message()));
    }
    return token;
  }
  DDP_ASSIGN_OR_RETURN(std::string token, JobTokenFromEnv(ProcessEnv()));
  if (!token.empty()) return token;
  if (options.nnodes == 1) return GenerateJobToken();
  return absl::InvalidArgumentError(absl::StrCat(
      "a job of --nnodes=", options.nnodes, " needs a job token shared by every node's ddprun: pass the same "
      "--job_token=SECRET, or --job_token_file=PATH on a filesystem every node sees (node 0 creates it), or set "
      "DDP_JOB_TOKEN / DDP_JOB_TOKEN_FILE"));
}

// Where node 0's store listens: on the address it was given, master_addr itself for a single-node job,
// and for a multi-node job master_addr when this host owns it, else every interface (an address
// forwarded to this host); store/store_exposure.h.
std::string StoreHost(const LaunchOptions& options) {
  return options.nnodes == 1 ? options.master_addr : StoreListenHost(options.master_addr);
}

absl::StatusOr<std::unique_ptr<TcpStoreServer>> StartStore(const std::string& listen_host, const std::string& addr,
                                                            int port, const std::string& token) {
  TcpStoreServerOptions server_options;
  server_options.host = listen_host;
  server_options.port = port;
  server_options.job_token = token;
  auto server = TcpStoreServer::Create(server_options);
  if (!server.ok()) {
    return absl::Status(server.status().code(), absl::StrCat("cannot start the store on ", addr, ":", port, ": ",
                                                             server.status().message()));
  }
  return server;
}

constexpr char kWorkerMasterPortKey[] = "ddprun/worker_master_port";
constexpr char kJobIdKey[] = "ddprun/job_id";

// What node 0 decides for the whole job and the other nodes learn from its store.
struct NodeAgreement {
  int worker_master_port = 0;  // the workers' MASTER_PORT (Note [Two ports])
  std::string job_id;          // DDP_JOB_ID
};

// Node 0 picks a free port for the workers' MASTER_PORT and a random job id and, in a multi-node job,
// publishes both in its store; the other nodes read them from there.
absl::StatusOr<NodeAgreement> AgreeWithNode0(const LaunchOptions& options, int store_port, const std::string& token) {
  NodeAgreement agreed;
  if (options.node_rank == 0) {
    DDP_ASSIGN_OR_RETURN(agreed.worker_master_port, PickFreePort());
    agreed.job_id = GenerateJobToken().substr(0, 16);
    if (options.nnodes == 1) return agreed;
  }
  TcpStoreClientOptions client_options;
  client_options.host = options.master_addr;
  if (options.node_rank == 0 && StoreHost(options) == "0.0.0.0") client_options.host = "127.0.0.1";
  client_options.port = store_port;
  client_options.job_token = token;
  client_options.connect_timeout = kNodeJoinTimeout;
  DDP_ASSIGN_OR_RETURN(std::unique_ptr<TcpStoreClient> client, TcpStoreClient::Create(client_options));
  if (options.node_rank == 0) {
    DDP_RETURN_IF_ERROR(client->Set(kJobIdKey, agreed.job_id));
    DDP_RETURN_IF_ERROR(client->Set(kWorkerMasterPortKey, absl::StrCat(agreed.worker_master_port)));
    return agreed;
  }
  DDP_ASSIGN_OR_RETURN(std::string text, client->Get(kWorkerMasterPortKey, kNodeJoinTimeout));
  if (!absl::SimpleAtoi(text, &agreed.worker_master_port)) {
    return absl::InternalError(absl::StrCat("node 0 published MASTER_PORT \"", text, "\""));
  }
  DDP_ASSIGN_OR_RETURN(agreed.job_id, client->Get(kJobIdKey, kNodeJoinTimeout));
  return agreed;
}

// Where this node stands in the job, whichever rendezvous placed it.
struct NodePlace {
  int node_rank = 0;
  int nnodes = 1;
  std::string master_addr;  // the workers' MASTER_ADDR
  std::string store_addr;   // where ddprun's store is reached (DDP_STORE_ADDR)
  int store_port = 0;
  NodeAgreement agreed;     // the workers' MASTER_PORT and the job id
};

// A static rendezvous: node 0 hosts the store at master_addr:master_port; every node knows its rank.
absl::StatusOr<NodePlace> StaticPlace(const LaunchOptions& options, const std::string& token,
                                      std::unique_ptr<TcpStoreServer>* store) {
  NodePlace place;
  place.node_rank = options.node_rank;
  place.nnodes = options.nnodes;
  place.master_addr = place.store_addr = options.master_addr;
  place.store_port = options.master_port;
  if (options.node_rank == 0) {
    DDP_ASSIGN_OR_RETURN(*store, StartStore(StoreHost(options), options.master_addr, options.master_port, token));
    place.store_port = (*store)->port();
  }
  DDP_ASSIGN_OR_RETURN(place.agreed, AgreeWithNode0(options, place.store_port, token));
  return place;
}

// Whether this node hosts a c10d rendezvous: rdzv_conf is_host, else whether it owns the endpoint's address.
bool OwnsEndpoint(const LaunchOptions& options) {
  return options.is_host.value_or(StoreListenHost(options.rdzv_host) != "0.0.0.0");
}

// A c10d rendezvous (launch/node_rendezvous.h): the node that owns --rdzv_endpoint hosts the store and
// becomes node 0 (when another ddprun on this host already listens there, this one joins it, as
// torchrun's agents do); the others get their node ranks in joining order.
absl::StatusOr<NodePlace> C10dPlace(const LaunchOptions& options, const std::string& token,
                                    std::unique_ptr<TcpStoreServer>* store) {
  bool hosts = OwnsEndpoint(options);
  const std::string listen = options.nnodes == 1 ? options.rdzv_host : StoreListenHost(options.rdzv_host);
  int port = options.rdzv_port;
  std::string connect_host = options.rdzv_host;
  if (hosts) {
    absl::StatusOr<std::unique_ptr<TcpStoreServer>> server = StartStore(listen, options.rdzv_host, port, token);
    if (server.ok()) {
      *store = std::move(*server);
      port = (*store)->port();
      if (listen == "0.0.0.0") connect_host = "127.0.0.1";
    } else if (!options.is_host.has_value() && absl::StrContains(server.status().message(), "in use")) {
      Say(absl::StrCat(options.rdzv_host, ":", port, " is taken on this host: joining the rendezvous there"));
      hosts = false;
    } else {
      return server.status();
    }
  }
  TcpStoreClientOptions client_options;
  client_options.host = connect_host;
  client_options.port = port;
  client_options.job_token = token;
  client_options.connect_timeout = options.join_timeout;
  DDP_ASSIGN_OR_RETURN(std::unique_ptr<TcpStoreClient> client, TcpStoreClient::Create(client_options));
  NodeRendezvousOptions rdzv;
  rdzv.is_host = hosts;
  rdzv.min_nodes = options.min_nodes;
  rdzv.max_nodes = options.nnodes;
  rdzv.nproc_per_node = options.nproc_per_node;
  rdzv.run_id = options.run_id;
  rdzv.join_timeout = options.join_timeout;
  rdzv.last_call_timeout = options.last_call_timeout;
  if (hosts) {
    rdzv.master_addr = options.local_addr.empty() ? options.rdzv_host : options.local_addr;
    DDP_ASSIGN_OR_RETURN(rdzv.worker_master_port, PickFreePort());
    rdzv.job_id = GenerateJobToken().substr(0, 16);
  }
  DDP_ASSIGN_OR_RETURN(const NodeAssignment assigned, JoinNodeRendezvous(*client, rdzv));
  NodePlace place;
  place.node_rank = assigned.node_rank;
  place.nnodes = assigned.nnodes;
  place.master_addr = assigned.master_addr;
  place.store_addr = connect_host;
  place.store_port = port;
  place.agreed.worker_master_port = assigned.worker_master_port;
  place.agreed.job_id = assigned.job_id;
  if (options.min_nodes != options.nnodes) {
    Say(absl::StrCat("the rendezvous closed with ", place.nnodes, " nodes (--nnodes=", options.min_nodes, ":",
                     options.nnodes, "); this is node ", place.node_rank));
  }
  return place;
}

// "SIGTERM,SIGINT,..." for TORCHELASTIC_SIGNALS_TO_HANDLE.
std::string SignalNames(const std::vector<int>& signals) {
  std::string names;
  for (int signo : signals) {
    const char* abbrev = ::sigabbrev_np(signo);
    absl::StrAppend(&names, names.empty() ? "" : ",", "SIG", abbrev != nullptr ? abbrev : absl::StrCat(signo));
  }
  return names;
}

// The layout of the first attempt; prints torchrun's notice when it sets OMP_NUM_THREADS=1.
JobLayout FirstLayout(const LaunchOptions& options, const NodePlace& place, const std::string& token) {
  JobLayout layout;
  layout.nproc_per_node = options.nproc_per_node;
  layout.nnodes = place.nnodes;
  layout.node_rank = place.node_rank;
  layout.master_addr = place.master_addr;
  layout.store_addr = place.store_addr;
  layout.store_port = place.store_port;
  layout.master_port = place.agreed.worker_master_port;
  layout.job_id = place.agreed.job_id;
  layout.max_restarts = options.max_restarts;
  layout.job_token = token;
  layout.run_id = options.run_id;
  layout.role = options.role;
  layout.signals_to_handle = SignalNames(options.signals_to_handle);
  layout.default_omp_num_threads = options.nproc_per_node > 1 && std::getenv("OMP_NUM_THREADS") == nullptr;
  if (layout.default_omp_num_threads) WriteFully(2, kOmpNumThreadsNotice);
  return layout;
}

void SayIfFailed(const absl::Status& status) {
  if (!status.ok()) Say(status.ToString());
}

void ReportFailure(const GroupOutcome& outcome) {
  Say(absl::StrCat("rank ", outcome.failed_rank, " failed first with ", outcome.exit_description));
  Say(absl::StrCat("last ", outcome.tail.size(), " line(s) of rank ", outcome.failed_rank, ":"));
  for (const std::string& line : outcome.tail) WriteFully(2, absl::StrCat("  | ", line, "\n"));
  if (!outcome.error_file_message.empty()) {
    Say(absl::StrCat("rank ", outcome.failed_rank, "'s error file (TORCHELASTIC_ERROR_FILE) says:"));
    for (absl::string_view line : absl::StrSplit(outcome.error_file_message, '\n', absl::SkipEmpty())) {
      WriteFully(2, absl::StrCat("  | ", line, "\n"));
    }
  }
}

}  // namespace

absl::Status ValidateLaunchOptions(const LaunchOptions& o) {
  if (o.nproc_per_node < 1 || o.nproc_per_node > kMaxProcPerNode) {
    return absl::InvalidArgumentError(absl::StrCat("--nproc_per_node must be in [1, ", kMaxProcPerNode,
                                                   "] (workers on this node), got ", o.nproc_per_node));
  }
  if (o.nnodes < 1) return absl::InvalidArgumentError("--nnodes must be >= 1");
  if (o.min_nodes < 1 || o.min_nodes > o.nnodes) {
    return absl::InvalidArgumentError(absl::StrCat("--nnodes=", o.min_nodes, ":", o.nnodes, " needs 1 <= MIN <= MAX"));
  }
  if (o.rdzv_backend == RendezvousBackend::kStatic && o.min_nodes != o.nnodes) {
    return absl::InvalidArgumentError("--nnodes=MIN:MAX needs --rdzv_backend=c10d");
  }
  if (o.rdzv_backend == RendezvousBackend::kC10d &&
      (o.rdzv_host.empty() || o.rdzv_port < 0 || o.rdzv_port > 65535 || (o.rdzv_port == 0 && o.nnodes > 1))) {
    return absl::InvalidArgumentError(absl::StrCat("--rdzv_endpoint ", o.rdzv_host, ":", o.rdzv_port,
                                                   " is not usable (port 0 works for one node only)"));
  }
  if (o.monitor_interval <= absl::ZeroDuration()) return absl::InvalidArgumentError("--monitor_interval must be > 0");
  if (o.signals_to_handle.empty()) return absl::InvalidArgumentError("--signals_to_handle names no signal");
  if (o.node_rank < 0 || o.node_rank >= o.nnodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--node_rank ", o.node_rank, " is not in [0, --nnodes=", o.nnodes, ")"));
  }
  if (o.master_port < 0 || o.master_port > 65535) {
    return absl::InvalidArgumentError("--master_port must be in [0, 65535]");
  }
  if (o.master_port == 0 && o.nnodes > 1) {
    return absl::InvalidArgumentError("--master_port=0 (pick a free port) needs --nnodes=1");
  }
  if (o.max_restarts < 0) return absl::InvalidArgumentError("--max_restarts must be >= 0");
  if (o.grace_period < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--grace_period_s must be >= 0");
  }
  if (!o.job_token.empty() && !o.job_token_file.empty()) {
    return absl::InvalidArgumentError("give --job_token or --job_token_file, not both");
  }
  if (o.command.empty()) return absl::InvalidArgumentError("no program to run was given");
  DDP_RETURN_IF_ERROR(ValidateElasticLaunchOptions(o.elastic, o.nnodes * o.nproc_per_node));
  return absl::OkStatus();
}

absl::StatusOr<int> RunLauncher(const LaunchOptions& options) {
  DDP_RETURN_IF_ERROR(ValidateLaunchOptions(options));
  if (!options.log_dir.empty() && ::mkdir(options.log_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::UnavailableError(absl::StrCat("cannot create --log_dir ", options.log_dir, ": ",
                                               std::strerror(errno)));
  }
  const bool c10d = options.rdzv_backend == RendezvousBackend::kC10d;
  DDP_ASSIGN_OR_RETURN(const std::string token,
                       ChooseJobToken(options, c10d ? OwnsEndpoint(options) : options.node_rank == 0));
  std::unique_ptr<TcpStoreServer> store;
  DDP_ASSIGN_OR_RETURN(const NodePlace place,
                       c10d ? C10dPlace(options, token, &store) : StaticPlace(options, token, &store));
  DDP_ASSIGN_OR_RETURN(std::unique_ptr<WorkerLogTree> log_tree, WorkerLogTree::Create(options.log_dir, options.run_id));
  if (options.redirects.Any() || options.tee.Any()) {
    log_tree->Keep();
    Say(absl::StrCat("worker logs (--redirects, --tee) go to ", log_tree->run_dir()));
  }
  WorkerGroupConfig config;
  config.layout = FirstLayout(options, place, token);
  ScopedSignalPipe signals(options.signals_to_handle);
  config.command = options.command;
  config.redirect = options.redirect;
  config.log_dir = options.log_dir;
  config.grace_period = options.grace_period;
  config.monitor_interval = options.monitor_interval;
  config.log_tree = log_tree.get();
  config.redirects = options.redirects;
  config.tee = options.tee;
  config.local_ranks_filter = options.local_ranks_filter;
  config.console = options.console;
  config.virtual_local_rank = options.virtual_local_rank;
  config.signal_fd = signals.read_fd();
  config.elastic = options.elastic.enabled;
  config.extra_env = ElasticWorkerVariables(options.elastic);
  int replacements = 0;  // elastic: lost workers replaced so far; they share --max_restarts with restarts
  for (int restart = 0;; ++restart) {
    config.layout.restart_count = restart;
    config.max_replacements = options.elastic.enabled ? options.max_restarts - restart - replacements : 0;
    DDP_RETURN_IF_ERROR(log_tree->StartAttempt(restart, options.nproc_per_node));
    config.on_first_failure = [&config, restart](int rank, const std::string& how) {
      RecordExitNotice(config.layout, restart, rank, how);
    };
    config.on_worker_lost = [&config, restart](int rank, int member, const std::string& how) {
      RecordExitNotice(config.layout, restart, member, how);
      RecordElasticLoss(config.layout, restart, member);
      Say(absl::StrCat("elastic: ", member == rank ? "" : absl::StrCat("member ", member, " in "), "rank ",
                       rank, member == rank ? "" : "'s slot", " failed with ", how, "; the others go on"));
    };
    config.on_worker_finished = [&config, restart] { CloseElasticJob(config.layout, restart); };
    config.replace_worker = [&config, &options, &replacements, restart](
                                int rank, int alive) -> std::optional<std::map<std::string, std::string>> {
      const int used = restart + replacements;
      if (!MayReplace(options.elastic, options.max_restarts - used, alive)) return std::nullopt;
      if (ElasticJobClosed(config.layout, restart)) return std::nullopt;
      absl::StatusOr<int> member = AllocateReplacementMember(config.layout, restart);
      if (!member.ok()) {
        Say(absl::StrCat("elastic: no replacement for rank ", rank, ": ", member.status().message()));
        return std::nullopt;
      }
      ++replacements;
      Say(absl::StrCat("elastic: starting member ", *member, " in rank ", rank, "'s slot to rejoin the job (restart ",
                       used + 1, " of ", options.max_restarts, ")"));
      return ReplacementVariables(*member);
    };
    DDP_ASSIGN_OR_RETURN(GroupOutcome outcome, RunWorkerGroup(config));
    if (outcome.kind == GroupOutcome::Kind::kSucceeded) {
      SayIfFailed(PassExitBarrier(config.layout));  // Note [Exit barrier]
      if (!outcome.lost_ranks.empty()) {
        Say(absl::StrCat("elastic: the job finished without the lost rank(s) ", absl::StrJoin(outcome.lost_ranks, ", ")));
      }
      return 0;
    }
    if (outcome.kind == GroupOutcome::Kind::kInterrupted) {
      Say(absl::StrCat("stopped by signal ", outcome.signal));
      return 128 + outcome.signal;
    }
    if (restart + replacements < options.max_restarts) {
      Say(absl::StrCat("rank ", outcome.failed_rank, " failed with ", outcome.exit_description,
                       "; restarting the worker group (restart ", restart + replacements + 1, " of ",
                       options.max_restarts, ")"));
      continue;
    }
    ReportFailure(outcome);
    if (config.layout.node_rank != 0) SayIfFailed(PassExitBarrier(config.layout));
    return outcome.exit_code;
  }
}

}  // namespace ddp
