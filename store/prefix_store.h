// PrefixStore: a key namespace inside another Store (PyTorch's c10d::PrefixStore).
#ifndef DDP_STORE_PREFIX_STORE_H_
#define DDP_STORE_PREFIX_STORE_H_

#include <cstdint>
#include <string>

#include "store/store.h"

namespace ddp {

// Forwards every call to `base` with each key rewritten to "<prefix>/<key>". Error messages name the
// full (prefixed) keys. NumKeys() counts every key of `base`, as PyTorch's PrefixStore does.
// Ownership: does not own `base`. Thread safety: as thread-safe as `base` (all stores are).
// Typical use: one PrefixStore per process group, or per restart ("attempt_<DDP_RESTART_COUNT>").
class PrefixStore : public Store {
 public:
  // REQUIRES: `base` is not null and outlives this PrefixStore.
  PrefixStore(std::string prefix, Store* base);

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::StatusOr<std::string> CompareSet(absl::string_view key, absl::string_view expected,
                                         absl::string_view desired) override;
  absl::StatusOr<bool> DeleteKey(absl::string_view key) override;
  absl::Status Wait(absl::Span<const std::string> keys, absl::Duration timeout) override;
  absl::StatusOr<int64_t> NumKeys() override;

  // The prefix this store adds (without the trailing '/').
  const std::string& prefix() const { return prefix_; }

 private:
  std::string Prefixed(absl::string_view key) const;

  const std::string prefix_;
  Store* const base_;  // Not owned.
};

}  // namespace ddp

#endif  // DDP_STORE_PREFIX_STORE_H_
