// Who can reach a TCP store: the address its server listens on, and the refusal due when it would
// accept any client from beyond this host. Shared by the store rank 0 hosts (comm/init.h), the one
// ddprun hosts (launch/launcher.h) and the server itself, so all decide and word it alike.
#ifndef DDP_STORE_STORE_EXPOSURE_H_
#define DDP_STORE_STORE_EXPOSURE_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ddp {

// True when `host` resolves, and only to loopback addresses (127.0.0.0/8, ::1): "127.0.0.1",
// "localhost". False for "0.0.0.0", "" and names that do not resolve. Blocking name lookup; thread-safe.
bool IsLoopbackHost(const std::string& host);

// Where a store server for clients that reach it at `master_addr` should listen, so that nobody else
// can: the first numeric address of `master_addr` that this host owns (a loopback MASTER_ADDR stays
// loopback; a name of this host's 10.0.0.7 gives "10.0.0.7"), else "0.0.0.0", every interface (an address
// this host does not own, e.g. one forwarded to it, or a name that does not resolve). Blocking name
// lookup; thread-safe.
std::string StoreListenHost(const std::string& master_addr);

// OK when a store server listening on `listen_host`:`port` with `token` can only be reached from this
// host, or requires a token; else kFailedPrecondition saying so and how to give one, e.g. "the TCP
// store on 0.0.0.0:29500 would accept any client that can reach it: beyond loopback a job token is
// required (set DDP_JOB_TOKEN or DDP_JOB_TOKEN_FILE to the same secret for every rank; ddprun:
// --job_token or --job_token_file)". Note [Job tokens] in store/job_token.cc. Thread-safe.
absl::Status CheckStoreExposure(const std::string& listen_host, int port, absl::string_view token);

}  // namespace ddp

#endif  // DDP_STORE_STORE_EXPOSURE_H_
