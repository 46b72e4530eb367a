#include "store/tcp_store.h"

#include <utility>

#include "base/check.h"

namespace ddp {

absl::StatusOr<std::unique_ptr<TcpStore>> TcpStore::Create(TcpStoreOptions options) {
  std::unique_ptr<TcpStoreServer> server;
  int port = options.port;
  if (options.is_server) {
    TcpStoreServerOptions server_options;
    server_options.host = options.server_bind_host;
    server_options.port = options.port;
    server_options.job_token = options.job_token;
    server_options.limits = options.limits;
    server_options.max_store_bytes = options.max_store_bytes;
    DDP_ASSIGN_OR_RETURN(server, TcpStoreServer::Create(std::move(server_options)));
    port = server->port();
  }
  TcpStoreClientOptions client_options;
  client_options.host = options.host;
  client_options.port = port;
  client_options.job_token = options.job_token;
  client_options.connect_timeout = options.connect_timeout;
  client_options.io_timeout = options.io_timeout;
  client_options.limits = options.limits;
  DDP_ASSIGN_OR_RETURN(std::unique_ptr<TcpStoreClient> client,
                       TcpStoreClient::Create(std::move(client_options)));
  return std::unique_ptr<TcpStore>(new TcpStore(port, std::move(server), std::move(client)));
}

TcpStore::TcpStore(int port, std::unique_ptr<TcpStoreServer> server,
                   std::unique_ptr<TcpStoreClient> client)
    : port_(port), server_(std::move(server)), client_(std::move(client)) {}

absl::Status TcpStore::Set(absl::string_view key, absl::string_view value) {
  return client_->Set(key, value);
}

absl::StatusOr<std::string> TcpStore::Get(absl::string_view key, absl::Duration timeout) {
  return client_->Get(key, timeout);
}

absl::StatusOr<int64_t> TcpStore::Add(absl::string_view key, int64_t delta) {
  return client_->Add(key, delta);
}

absl::StatusOr<std::string> TcpStore::CompareSet(absl::string_view key, absl::string_view expected,
                                                 absl::string_view desired) {
  return client_->CompareSet(key, expected, desired);
}

absl::StatusOr<bool> TcpStore::DeleteKey(absl::string_view key) { return client_->DeleteKey(key); }

absl::Status TcpStore::Wait(absl::Span<const std::string> keys, absl::Duration timeout) {
  return client_->Wait(keys, timeout);
}

absl::StatusOr<int64_t> TcpStore::NumKeys() { return client_->NumKeys(); }

}  // namespace ddp
