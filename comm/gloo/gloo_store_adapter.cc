#include "comm/gloo/gloo_store_adapter.h"

#include "absl/strings/str_cat.h"
#include "gloo/common/error.h"
#include "base/check.h"

namespace ddp {
namespace {

void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) throw gloo::IoException(status.ToString());
}

}  // namespace

GlooStoreAdapter::GlooStoreAdapter(ddp::Store* store, absl::Duration default_timeout)
    : store_(store), default_timeout_(default_timeout) {
  DDP_CHECK(store_ != nullptr) << "GlooStoreAdapter needs a store";
}

void GlooStoreAdapter::set(const std::string& key, const std::vector<char>& data) {
  ThrowIfError(store_->Set(key, absl::string_view(data.data(), data.size())));
}

std::vector<char> GlooStoreAdapter::get(const std::string& key) {
  absl::StatusOr<std::string> value = store_->Get(key, default_timeout_);
  ThrowIfError(value.status());
  return std::vector<char>(value->begin(), value->end());
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys) {
  ThrowIfError(store_->Wait(keys, default_timeout_));
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys,
                            const std::chrono::milliseconds& timeout) {
  const absl::Duration t =
      timeout == gloo::kNoTimeout ? default_timeout_ : absl::FromChrono(timeout);
  ThrowIfError(store_->Wait(keys, t));
}

}  // namespace ddp
