// The job token that keeps strangers out of a TCP store: DDP_JOB_TOKEN (ddprun and Spawn set it for
// their workers), or a file every node can read, DDP_JOB_TOKEN_FILE. Note [Job tokens] in
// store/job_token.cc says when a token is required.
#ifndef DDP_STORE_JOB_TOKEN_H_
#define DDP_STORE_JOB_TOKEN_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "store/launch_env.h"

namespace ddp {

// Name of the environment variable that carries the job token.
inline constexpr char kJobTokenEnv[] = "DDP_JOB_TOKEN";
// Name of the environment variable that names a file holding the job token.
inline constexpr char kJobTokenFileEnv[] = "DDP_JOB_TOKEN_FILE";
// The longest token accepted from a file.
inline constexpr size_t kMaxJobTokenBytes = 4096;

// The token in the file at `path`: its contents without surrounding whitespace. kInvalidArgument naming
// the path when it cannot be read, is empty or longer than kMaxJobTokenBytes, or holds whitespace or
// control characters inside.
absl::StatusOr<std::string> ReadJobTokenFile(const std::string& path);

// The token `env` gives: DDP_JOB_TOKEN when set and not empty, else the contents of the file
// DDP_JOB_TOKEN_FILE names when that is set, else "" (no token). Errors: ReadJobTokenFile's.
absl::StatusOr<std::string> JobTokenFromEnv(const EnvLookup& env);

// `token` when it has a value, else JobTokenFromEnv of this process's environment.
absl::StatusOr<std::string> ResolveJobToken(const std::optional<std::string>& token);

// Returns a fresh random token (32 hex digits from a 128-bit random number). Thread-safe.
std::string GenerateJobToken();

// The token in the file at `path`, which is created first (mode 0600, holding a fresh token) when it
// does not exist. Creation is atomic: a concurrent reader or creator sees the whole token or no file,
// and two creators end up with the same token. Errors name the path.
absl::StatusOr<std::string> CreateOrReadJobTokenFile(const std::string& path);

// Compares two tokens in time independent of where they differ.
bool TokensEqual(absl::string_view a, absl::string_view b);

}  // namespace ddp

#endif  // DDP_STORE_JOB_TOKEN_H_
