#include "comm/launch_env.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tensor/check.h"

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
constexpr VariableNames kSlurm = {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
                                  "SLURM_NTASKS_PER_NODE"};

absl::Status ReadRanks(const EnvLookup& env, const VariableNames& names, LaunchEnv* out) {
  out->source = names.source;
  DDP_ASSIGN_OR_RETURN(out->rank, ReadInt(env, names.rank, std::nullopt));
  DDP_ASSIGN_OR_RETURN(out->world_size, ReadInt(env, names.world_size, std::nullopt));
  DDP_ASSIGN_OR_RETURN(out->local_rank, ReadInt(env, names.local_rank, out->rank));
  DDP_ASSIGN_OR_RETURN(out->local_world_size, ReadInt(env, names.local_world_size, out->world_size));
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

}  // namespace

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
  if (std::optional<std::string> addr = env("MASTER_ADDR"); addr.has_value()) out.master_addr = *addr;
  DDP_ASSIGN_OR_RETURN(out.master_port, ReadInt(env, "MASTER_PORT", 29500));
  if (out.master_port < 1 || out.master_port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("MASTER_PORT=", out.master_port, " is not a TCP port"));
  }
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
