// Test worker for ddprun: proves the launcher's store (DDP_STORE_ADDR/DDP_STORE_PORT), token and
// variables work together.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "store/prefix_store.h"
#include "store/tcp_store_client.h"

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "rendezvous failed: %s\n", status.ToString().c_str());
  return 1;
}

}  // namespace

int main() {
  int port = 0, world = 0;
  if (!absl::SimpleAtoi(Env("DDP_STORE_PORT"), &port) || !absl::SimpleAtoi(Env("WORLD_SIZE"), &world)) {
    return Fail(absl::InvalidArgumentError("DDP_STORE_PORT/WORLD_SIZE not set"));
  }
  ddp::TcpStoreClientOptions options;
  options.host = Env("DDP_STORE_ADDR");
  options.port = port;  // Token from DDP_JOB_TOKEN.
  options.connect_timeout = absl::Seconds(10);
  auto client = ddp::TcpStoreClient::Create(options);
  if (!client.ok()) return Fail(client.status());
  ddp::PrefixStore store(absl::StrCat("attempt_", Env("DDP_RESTART_COUNT")), client->get());
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
