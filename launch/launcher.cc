#include "launch/launcher.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "store/job_token.h"
#include "absl/strings/numbers.h"
#include "store/socket_util.h"
#include "store/store_exposure.h"
#include "store/store_keys.h"
#include "store/tcp_store_client.h"
#include "store/tcp_store_server.h"
#include "launch/job_control.h"
#include "launch/worker_group.h"
#include "base/check.h"

namespace ddp {
namespace {

void Say(absl::string_view message) { WriteFully(2, absl::StrCat("ddprun: ", message, "\n")); }

// How long a node other than 0 waits for node 0's store and its word on MASTER_PORT (torchrun's join
// timeout), and for the job token file node 0 creates.
constexpr absl::Duration kNodeJoinTimeout = absl::Seconds(900);

// The token in `path`: node 0 creates the file when missing; the other nodes wait for it to appear.
absl::StatusOr<std::string> TokenFromFile(const LaunchOptions& options, const std::string& path) {
  if (options.node_rank == 0) return CreateOrReadJobTokenFile(path);
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
absl::StatusOr<std::string> ChooseJobToken(const LaunchOptions& options) {
  if (!options.job_token.empty()) return options.job_token;
  if (!options.job_token_file.empty()) {
    absl::StatusOr<std::string> token = TokenFromFile(options, options.job_token_file);
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

absl::StatusOr<std::unique_ptr<TcpStoreServer>> StartStore(const LaunchOptions& options,
                                                            const std::string& token) {
  TcpStoreServerOptions server_options;
  server_options.host = StoreHost(options);
  server_options.port = options.master_port;
  server_options.job_token = token;
  auto server = TcpStoreServer::Create(server_options);
  if (!server.ok()) {
    return absl::Status(server.status().code(),
                        absl::StrCat("cannot start the store on ", options.master_addr, ":",
                                     options.master_port, ": ", server.status().message()));
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

// The layout of the first attempt; prints torchrun's notice when it sets OMP_NUM_THREADS=1.
absl::StatusOr<JobLayout> FirstLayout(const LaunchOptions& options, int store_port, const std::string& token) {
  JobLayout layout;
  layout.nproc_per_node = options.nproc_per_node;
  layout.nnodes = options.nnodes;
  layout.node_rank = options.node_rank;
  layout.master_addr = options.master_addr;
  layout.store_port = store_port;
  DDP_ASSIGN_OR_RETURN(const NodeAgreement agreed, AgreeWithNode0(options, store_port, token));
  layout.master_port = agreed.worker_master_port;
  layout.job_id = agreed.job_id;
  layout.max_restarts = options.max_restarts;
  layout.job_token = token;
  layout.default_omp_num_threads = options.nproc_per_node > 1 && std::getenv("OMP_NUM_THREADS") == nullptr;
  if (layout.default_omp_num_threads) WriteFully(2, kOmpNumThreadsNotice);
  return layout;
}

void ReportFailure(const GroupOutcome& outcome) {
  Say(absl::StrCat("rank ", outcome.failed_rank, " failed first with exit code ", outcome.exit_code,
                   outcome.exit_code > 128 ? absl::StrCat(" (signal ", outcome.exit_code - 128, ")")
                                           : std::string()));
  Say(absl::StrCat("last ", outcome.tail.size(), " line(s) of rank ", outcome.failed_rank, ":"));
  for (const std::string& line : outcome.tail) WriteFully(2, absl::StrCat("  | ", line, "\n"));
}

}  // namespace

absl::Status ValidateLaunchOptions(const LaunchOptions& o) {
  if (o.nproc_per_node < 1 || o.nproc_per_node > kMaxProcPerNode) {
    return absl::InvalidArgumentError(absl::StrCat("--nproc_per_node must be in [1, ", kMaxProcPerNode,
                                                   "] (workers on this node), got ", o.nproc_per_node));
  }
  if (o.nnodes < 1) return absl::InvalidArgumentError("--nnodes must be >= 1");
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
  DDP_ASSIGN_OR_RETURN(const std::string token, ChooseJobToken(options));
  std::unique_ptr<TcpStoreServer> store;
  int store_port = options.master_port;
  if (options.node_rank == 0) {
    DDP_ASSIGN_OR_RETURN(store, StartStore(options, token));
    store_port = store->port();
  }
  WorkerGroupConfig config;
  DDP_ASSIGN_OR_RETURN(config.layout, FirstLayout(options, store_port, token));
  ScopedSignalPipe signals;
  config.command = options.command;
  config.redirect = options.redirect;
  config.log_dir = options.log_dir;
  config.grace_period = options.grace_period;
  config.signal_fd = signals.read_fd();
  config.elastic = options.elastic.enabled;
  config.extra_env = ElasticWorkerVariables(options.elastic);
  for (int restart = 0;; ++restart) {
    config.layout.restart_count = restart;
    config.on_first_failure = [&config, restart](int rank, int exit_code) {
      RecordExitNotice(config.layout, restart, rank, exit_code);
    };
    config.on_worker_lost = [&config, restart](int rank, int exit_code) {
      RecordExitNotice(config.layout, restart, rank, exit_code);
      RecordElasticLoss(config.layout, restart, rank);
      Say(absl::StrCat("elastic: rank ", rank, " exited with code ", exit_code, "; the others go on"));
    };
    DDP_ASSIGN_OR_RETURN(GroupOutcome outcome, RunWorkerGroup(config));
    if (outcome.kind == GroupOutcome::Kind::kSucceeded) {
      if (!outcome.lost_ranks.empty()) {
        Say(absl::StrCat("elastic: the job finished without the lost rank(s) ", absl::StrJoin(outcome.lost_ranks, ", ")));
      }
      return 0;
    }
    if (outcome.kind == GroupOutcome::Kind::kInterrupted) {
      Say(absl::StrCat("stopped by signal ", outcome.signal));
      return 128 + outcome.signal;
    }
    if (restart < options.max_restarts) {
      Say(absl::StrCat("rank ", outcome.failed_rank, " exited with code ", outcome.exit_code,
                       "; restarting the worker group (restart ", restart + 1, " of ",
                       options.max_restarts, ")"));
      continue;
    }
    ReportFailure(outcome);
    return outcome.exit_code;
  }
}

}  // namespace ddp
