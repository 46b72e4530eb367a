// Test worker for ddprun: proves the launcher's store (DDP_STORE_ADDR/DDP_STORE_PORT), token and
// variables work together.
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "store/launch_env.h"
#include "store/prefix_store.h"
#include "store/tcp_store_client.h"

namespace {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "rendezvous failed: %s\n", status.ToString().c_str());
  return 1;
}

}  // namespace

int main() {
  absl::StatusOr<ddp::LaunchEnv> launch = ddp::ResolveLaunchEnv(ddp::ProcessEnv());
  if (!launch.ok()) return Fail(launch.status());
  if (!launch->store_in_launcher) return Fail(absl::InvalidArgumentError("DDP_STORE_IN_LAUNCHER is not 1"));
  const int world = launch->world_size;
  ddp::TcpStoreClientOptions options;
  options.host = launch->store_addr;
  options.port = launch->store_port;  // Token from DDP_JOB_TOKEN.
  options.connect_timeout = absl::Seconds(10);
  auto client = ddp::TcpStoreClient::Create(options);
  if (!client.ok()) return Fail(client.status());
  ddp::PrefixStore store(absl::StrCat("attempt_", launch->restart_count), client->get());
  auto arrived = store.Add("arrived", 1);
  if (!arrived.ok()) return Fail(arrived.status());
  if (*arrived == world) {
    absl::Status s = store.Set("all_here", "1");
    if (!s.ok()) return Fail(s);
  }
  absl::Status waited = store.Wait({"all_here"}, absl::Seconds(10));
  if (!waited.ok()) return Fail(waited);
  std::printf("rendezvous ok\n");
  return 0;
}
