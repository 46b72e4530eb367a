#include "store/job_token.h"

#include <cstdlib>

#include "absl/random/random.h"
#include "absl/strings/str_format.h"

namespace ddp {

std::string ResolveJobToken(const std::optional<std::string>& token) {
  if (token.has_value()) return *token;
  const char* env = std::getenv(kJobTokenEnv);
  return env == nullptr ? std::string() : std::string(env);
}

std::string GenerateJobToken() {
  absl::BitGen gen;  // Seeded from the OS's entropy.
  return absl::StrFormat("%016x%016x", absl::Uniform<uint64_t>(gen), absl::Uniform<uint64_t>(gen));
}

bool TokensEqual(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace ddp
