// GlooStoreAdapter: lets Gloo rendezvous (gloo::rendezvous::Context::connectFullMesh) through any of
// our Stores.
#ifndef DDP_COMM_GLOO_GLOO_STORE_ADAPTER_H_
#define DDP_COMM_GLOO_GLOO_STORE_ADAPTER_H_

#include <chrono>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "store/store.h"
#include "gloo/rendezvous/store.h"

namespace ddp {

// Implements gloo::rendezvous::Store on top of a ddp::Store. Gloo's interface reports errors by
// exceptions, so every failed Status is thrown as gloo::IoException (a std::runtime_error) carrying
// the Status's message (which names the keys on a timeout).
// Gloo's calls without a timeout (get, wait(keys)) and wait with gloo::kNoTimeout use
// `default_timeout`: a rendezvous never hangs forever.
// Ownership: does not own `store`. Thread safety: as thread-safe as `store`.
class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  // REQUIRES: `store` is not null and outlives the adapter (and every Gloo context using it).
  explicit GlooStoreAdapter(ddp::Store* store, absl::Duration default_timeout = kDefaultStoreTimeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  ddp::Store* const store_;  // Not owned.
  const absl::Duration default_timeout_;
};

}  // namespace ddp

#endif  // DDP_COMM_GLOO_GLOO_STORE_ADAPTER_H_
