#include "store/launch_env.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "store/scheduler_env.h"
#include "base/check.h"

namespace ddp {
namespace {

// Reads an integer variable; `fallback` when unset and not required.
absl::StatusOr<int> ReadInt(const EnvLookup& env, const std::string& name, std::optional<int> fallback) {
  std::optional<std::string> value = env(name);
  if (!value.has_value()) {
    if (fallback.has_value()) return *fallback;
    return absl::InvalidArgumentError(absl::StrCat("environment variable ", name, " is not set"));
  }
  int parsed = 0;
  if (!absl::SimpleAtoi(*value, &parsed) || parsed < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment variable ", name, "=\"", *value, "\" is not a non-negative integer"));
  }
  return parsed;
}

struct VariableNames {
  const char* source;
  const char* rank;
  const char* world_size;
  const char* local_rank;
  const char* local_world_size;
};

constexpr VariableNames kTorchrun = {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"};
constexpr VariableNames kOpenMpi = {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                    "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"};
// Slurm's local world size is read by SlurmLocalWorldSize (its compressed form is no integer).
constexpr VariableNames kSlurm = {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr};

absl::Status ReadRanks(const EnvLookup& env, const VariableNames& names, LaunchEnv* out) {
  out->source = names.source;
  DDP_ASSIGN_OR_RETURN(out->rank, ReadInt(env, names.rank, std::nullopt));
  DDP_ASSIGN_OR_RETURN(out->world_size, ReadInt(env, names.world_size, std::nullopt));
  DDP_ASSIGN_OR_RETURN(out->local_rank, ReadInt(env, names.local_rank, out->rank));
  if (names.local_world_size != nullptr) {
    DDP_ASSIGN_OR_RETURN(out->local_world_size, ReadInt(env, names.local_world_size, out->world_size));
  } else if (out->local_world_size < 1) {  // the caller found none
    out->local_world_size = out->world_size;
  }
  if (out->world_size < 1) return absl::InvalidArgumentError(absl::StrCat(names.world_size, " must be >= 1"));
  if (out->rank >= out->world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(names.rank, "=", out->rank, " is not below ", names.world_size, "=", out->world_size));
  }
  if (out->local_rank >= out->local_world_size) {
    return absl::InvalidArgumentError(absl::StrCat(names.local_rank, "=", out->local_rank, " is not below ",
                                                   names.local_world_size, "=", out->local_world_size));
  }
  return absl::OkStatus();
}

// This node's task count under srun: entry SLURM_NODEID of SLURM_NTASKS_PER_NODE (else
// SLURM_TASKS_PER_NODE), expanded from forms such as "2(x3),1"; `unset` when neither is set.
absl::StatusOr<int> SlurmLocalWorldSize(const EnvLookup& env, int unset) {
  std::optional<std::string> value = env("SLURM_NTASKS_PER_NODE");
  if (!value.has_value()) value = env("SLURM_TASKS_PER_NODE");
  if (!value.has_value()) return unset;
  DDP_ASSIGN_OR_RETURN(std::vector<int> counts, ExpandSlurmTasksPerNode(*value));
  DDP_ASSIGN_OR_RETURN(int node, ReadInt(env, "SLURM_NODEID", 0));
  if (counts.size() == 1) return counts[0];  // --ntasks-per-node=N: the same on every node
  if (node >= static_cast<int>(counts.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("SLURM_NODEID=", node, " has no entry in tasks per node \"", *value, "\""));
  }
  return counts[node];
}

// MASTER_ADDR derived from mpirun's or srun's variables (see ResolveLaunchEnv); nullopt when there is
// nothing to derive it from.
absl::StatusOr<std::optional<std::string>> DerivedMasterAddr(const EnvLookup& env, const std::string& source) {
  if (source == "openmpi") {
    if (env("OMPI_MCA_orte_num_nodes").value_or("") == "1") return std::optional<std::string>("127.0.0.1");
    std::optional<std::string> uri = env("OMPI_MCA_orte_hnp_uri");
    if (!uri.has_value()) return std::optional<std::string>();
    return OpenMpiLauncherAddress(*uri);
  }
  if (source != "slurm") return std::optional<std::string>();
  const std::string nodes = env("SLURM_STEP_NUM_NODES").value_or(env("SLURM_NNODES").value_or(""));
  if (nodes == "1") return std::optional<std::string>("127.0.0.1");
  for (const char* name : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}) {
    std::optional<std::string> list = env(name);
    if (!list.has_value()) continue;
    absl::StatusOr<std::vector<std::string>> hosts = ExpandSlurmNodeList(*list);
    if (!hosts.ok()) return absl::InvalidArgumentError(absl::StrCat(name, ": ", hosts.status().message()));
    return std::optional<std::string>(hosts->front());
  }
  return std::optional<std::string>();
}

// MASTER_ADDR/MASTER_PORT (or derived) and DDP_STORE_ADDR/DDP_STORE_PORT into `out`.
absl::Status ReadAddresses(const EnvLookup& env, LaunchEnv* out) {
  if (std::optional<std::string> addr = env("MASTER_ADDR"); addr.has_value()) {
    out->master_addr = *addr;
  } else {
    DDP_ASSIGN_OR_RETURN(std::optional<std::string> derived, DerivedMasterAddr(env, out->source));
    if (derived.has_value()) out->master_addr = *derived;
  }
  DDP_ASSIGN_OR_RETURN(out->master_port, ReadInt(env, "MASTER_PORT", 29500));
  if (out->master_port < 1 || out->master_port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("MASTER_PORT=", out->master_port, " is not a TCP port"));
  }
  out->store_addr = env("DDP_STORE_ADDR").value_or(out->master_addr);
  DDP_ASSIGN_OR_RETURN(out->store_port, ReadInt(env, "DDP_STORE_PORT", out->master_port));
  if (out->store_port < 1 || out->store_port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("DDP_STORE_PORT=", out->store_port, " is not a TCP port"));
  }
  return absl::OkStatus();
}

// The restart count, whether the launcher hosts the store, and the job id into `out`.
absl::Status ReadRestart(const EnvLookup& env, LaunchEnv* out) {
  const char* name = env("DDP_RESTART_COUNT").has_value() ? "DDP_RESTART_COUNT" : "TORCHELASTIC_RESTART_COUNT";
  DDP_ASSIGN_OR_RETURN(out->restart_count, ReadInt(env, name, 0));
  out->store_in_launcher = env("DDP_STORE_IN_LAUNCHER").value_or("0") == "1";
  out->job_id = env("DDP_JOB_ID").value_or("");
  return absl::OkStatus();
}

}  // namespace

std::map<std::string, std::string> LaunchEnvVariables(const LaunchEnv& launch) {
  std::map<std::string, std::string> variables = {
      {"RANK", absl::StrCat(launch.rank)},
      {"WORLD_SIZE", absl::StrCat(launch.world_size)},
      {"LOCAL_RANK", absl::StrCat(launch.local_rank)},
      {"LOCAL_WORLD_SIZE", absl::StrCat(launch.local_world_size)},
      {"MASTER_ADDR", launch.master_addr},
      {"MASTER_PORT", absl::StrCat(launch.master_port)},
      {"DDP_STORE_ADDR", launch.store_addr},
      {"DDP_STORE_PORT", absl::StrCat(launch.store_port)},
      {"DDP_RESTART_COUNT", absl::StrCat(launch.restart_count)},
      {"TORCHELASTIC_RESTART_COUNT", absl::StrCat(launch.restart_count)},
  };
  if (launch.store_in_launcher) variables["DDP_STORE_IN_LAUNCHER"] = "1";
  if (!launch.job_id.empty()) variables["DDP_JOB_ID"] = launch.job_id;
  return variables;
}

EnvLookup ProcessEnv() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

absl::StatusOr<LaunchEnv> ResolveLaunchEnv(const EnvLookup& env, int rank, int world_size) {
  LaunchEnv out;
  if (env("RANK").has_value()) {
    DDP_RETURN_IF_ERROR(ReadRanks(env, kTorchrun, &out));
  } else if (env("OMPI_COMM_WORLD_RANK").has_value()) {
    DDP_RETURN_IF_ERROR(ReadRanks(env, kOpenMpi, &out));
  } else if (env("SLURM_PROCID").has_value()) {
    DDP_ASSIGN_OR_RETURN(out.local_world_size, SlurmLocalWorldSize(env, /*unset=*/0));
    DDP_RETURN_IF_ERROR(ReadRanks(env, kSlurm, &out));
  } else {
    out.rank = rank >= 0 ? rank : 0;
    out.world_size = world_size >= 0 ? world_size : 1;
    out.local_rank = out.rank;
    out.local_world_size = out.world_size;
    if (out.rank >= out.world_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", out.rank, " is not below world size ", out.world_size));
    }
  }
  if (rank >= 0 && rank != out.rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank argument ", rank, " contradicts the environment's rank ", out.rank, " (", out.source, ")"));
  }
  if (world_size >= 0 && world_size != out.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("world_size argument ", world_size,
                                                   " contradicts the environment's world size ",
                                                   out.world_size, " (", out.source, ")"));
  }
  DDP_RETURN_IF_ERROR(ReadAddresses(env, &out));
  DDP_RETURN_IF_ERROR(ReadRestart(env, &out));
  return out;
}

namespace {

// $name as seconds (> 0, or >= 0 when `allow_zero`), `fallback` when unset; the error names the variable.
absl::StatusOr<absl::Duration> ReadSeconds(const EnvLookup& env, const char* name, absl::Duration fallback,
                                           bool allow_zero) {
  std::optional<std::string> value = env(name);
  if (!value.has_value()) return fallback;
  double seconds = 0;
  if (!absl::SimpleAtod(*value, &seconds) || !(allow_zero ? seconds >= 0 : seconds > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(name, "=\"", *value, "\" is not a ",
                                                   allow_zero ? "non-negative" : "positive", " number of seconds"));
  }
  return absl::Seconds(seconds);
}

}  // namespace

absl::StatusOr<absl::Duration> ResolveTimeout(const EnvLookup& env, absl::Duration fallback) {
  return ReadSeconds(env, "DDP_TIMEOUT_S", fallback, /*allow_zero=*/false);
}

absl::StatusOr<absl::Duration> ResolveFailureReportWindow(const EnvLookup& env, absl::Duration fallback) {
  return ReadSeconds(env, "DDP_FAILURE_REPORT_WINDOW_S", fallback, /*allow_zero=*/true);
}

}  // namespace ddp
