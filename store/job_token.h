// The job token that keeps strangers out of a TCP store (env DDP_JOB_TOKEN, set by ddprun).
#ifndef DDP_STORE_JOB_TOKEN_H_
#define DDP_STORE_JOB_TOKEN_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace ddp {

// Name of the environment variable that carries the job token.
inline constexpr char kJobTokenEnv[] = "DDP_JOB_TOKEN";

// Returns `token` when it has a value, else the value of $DDP_JOB_TOKEN, else "" (no token).
std::string ResolveJobToken(const std::optional<std::string>& token);

// Returns a fresh random token (32 hex digits from a 128-bit random number). Thread-safe.
std::string GenerateJobToken();

// Compares two tokens in time independent of where they differ.
bool TokensEqual(absl::string_view a, absl::string_view b);

}  // namespace ddp

#endif  // DDP_STORE_JOB_TOKEN_H_
