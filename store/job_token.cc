#include "store/job_token.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/random/random.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/unique_fd.h"

// Note [Job tokens]: a TCP store that listens beyond loopback refuses to start without a token
// (TcpStoreServer::Create), since anyone who can reach the port could otherwise join the job, read its
// keys or fill the server's memory. ddprun makes one per job (a single-node job always; a multi-node
// job takes --job_token, --job_token_file or the variables below, which every node must share) and
// hands it to its workers as DDP_JOB_TOKEN; Spawn does the same. Ranks started by hand share it through
// DDP_JOB_TOKEN or DDP_JOB_TOKEN_FILE. A store on loopback may run without one (the ranks started by
// hand on one host have no way to agree on a secret): it is then open to every user of the host, as
// PyTorch's TCPStore is, and only the rank-slot claim (store/rank_claim.h) keeps a second job out.

namespace ddp {
namespace {

absl::Status TokenFileError(const std::string& path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("job token file ", path, ": ", what));
}

// Writes all of `data` to `fd`.
bool WriteAll(int fd, absl::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

}  // namespace

absl::StatusOr<std::string> ReadJobTokenFile(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return TokenFileError(path, std::strerror(errno));
  std::string text;
  char buffer[1024];
  while (text.size() <= kMaxJobTokenBytes + 64) {
    const ssize_t n = ::read(fd.get(), buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return TokenFileError(path, std::strerror(errno));
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
  }
  const absl::string_view token = absl::StripAsciiWhitespace(text);
  if (token.empty()) return TokenFileError(path, "it is empty");
  if (token.size() > kMaxJobTokenBytes) {
    return TokenFileError(path, absl::StrCat("a token is at most ", kMaxJobTokenBytes, " bytes"));
  }
  for (char c : token) {
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f) {
      return TokenFileError(path, "the token holds whitespace or control characters");
    }
  }
  return std::string(token);
}

absl::StatusOr<std::string> JobTokenFromEnv(const EnvLookup& env) {
  if (std::optional<std::string> token = env(kJobTokenEnv); token.has_value() && !token->empty()) return *token;
  if (std::optional<std::string> path = env(kJobTokenFileEnv); path.has_value() && !path->empty()) {
    absl::StatusOr<std::string> token = ReadJobTokenFile(*path);
    if (!token.ok()) {
      return absl::Status(token.status().code(), absl::StrCat(token.status().message(), " (", kJobTokenFileEnv, ")"));
    }
    return token;
  }
  return std::string();
}

absl::StatusOr<std::string> ResolveJobToken(const std::optional<std::string>& token) {
  if (token.has_value()) return *token;
  return JobTokenFromEnv(ProcessEnv());
}

std::string GenerateJobToken() {
  absl::BitGen gen;  // Seeded from the OS's entropy.
  return absl::StrFormat("%016x%016x", absl::Uniform<uint64_t>(gen), absl::Uniform<uint64_t>(gen));
}

absl::StatusOr<std::string> CreateOrReadJobTokenFile(const std::string& path) {
  // Written in full under a private name, then linked into place: link() fails if the path exists, so
  // the file appears whole, once, and a creator that loses the race reads the winner's token.
  const std::string temp = absl::StrCat(path, ".tmp.", ::getpid(), ".", GenerateJobToken().substr(0, 8));
  UniqueFd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd.valid()) {
    if (::access(path.c_str(), F_OK) == 0) return ReadJobTokenFile(path);
    return TokenFileError(path, absl::StrCat("cannot create it: ", std::strerror(errno)));
  }
  const bool written = WriteAll(fd.get(), absl::StrCat(GenerateJobToken(), "\n")) && ::fsync(fd.get()) == 0;
  fd.Reset();
  const int linked = written ? ::link(temp.c_str(), path.c_str()) : -1;
  const int link_errno = errno;
  ::unlink(temp.c_str());
  if (!written) return TokenFileError(path, "cannot write it");
  if (linked != 0 && link_errno != EEXIST) {
    return TokenFileError(path, absl::StrCat("cannot create it: ", std::strerror(link_errno)));
  }
  return ReadJobTokenFile(path);
}

bool TokensEqual(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace ddp
