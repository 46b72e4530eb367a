#include "store/store_server_state.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "store/store.h"
#include "base/check.h"

namespace ddp {

StoreResponse StoreServerState::Satisfied(const Parked& parked) const {
  StoreResponse response;
  if (parked.op == StoreOp::kGet) response.value = *table_.Find(parked.keys[0]);
  return response;
}

std::optional<StoreResponse> StoreServerState::Handle(int64_t connection,
                                                      const StoreRequest& request,
                                                      absl::Time now) {
  StoreResponse response;
  switch (request.op) {
    case StoreOp::kSet:
      table_.Set(request.keys[0], request.value);
      written_since_check_ = true;
      return response;
    case StoreOp::kAdd: {
      absl::StatusOr<int64_t> sum = table_.Add(request.keys[0], request.number);
      if (!sum.ok()) return ResponseFromStatus(sum.status());
      written_since_check_ = true;
      response.number = *sum;
      return response;
    }
    case StoreOp::kCompareSet: {
      KvTable::CompareSetResult r = table_.CompareSet(request.keys[0], request.value,
                                                      request.desired);
      written_since_check_ |= r.swapped;
      response.value = std::move(r.value);
      return response;
    }
    case StoreOp::kDeleteKey:
      response.number = table_.Delete(request.keys[0]) ? 1 : 0;
      return response;
    case StoreOp::kNumKeys:
      response.number = table_.size();
      return response;
    case StoreOp::kGet:
    case StoreOp::kWait:
      break;
    case StoreOp::kHello:
      return ResponseFromStatus(absl::FailedPreconditionError("unexpected second hello"));
  }
  DDP_CHECK(!parked_.contains(connection)) << "connection " << connection << " already waits";
  const absl::Duration timeout = TimeoutFromMs(request.number);
  Parked parked{request.op, request.keys, timeout, now + timeout};
  if (table_.Missing(parked.keys).empty()) return Satisfied(parked);
  parked_.emplace(connection, std::move(parked));
  return std::nullopt;
}

std::vector<StoreServerState::Completion> StoreServerState::TakeCompletions(absl::Time now) {
  std::vector<Completion> done;
  const bool check_keys = written_since_check_;
  written_since_check_ = false;
  for (auto it = parked_.begin(); it != parked_.end();) {
    const Parked& parked = it->second;
    std::vector<std::string> missing;
    if (check_keys || parked.deadline <= now) missing = table_.Missing(parked.keys);
    if ((check_keys || parked.deadline <= now) && missing.empty()) {
      done.push_back({it->first, Satisfied(parked)});
    } else if (parked.deadline <= now) {
      const char* op = parked.op == StoreOp::kGet ? "Get" : "Wait";
      done.push_back({it->first, ResponseFromStatus(StoreTimeoutError(op, missing, parked.timeout))});
    } else {
      ++it;
      continue;
    }
    parked_.erase(it++);
  }
  return done;
}

absl::Time StoreServerState::NextDeadline() const {
  absl::Time next = absl::InfiniteFuture();
  for (const auto& [connection, parked] : parked_) next = std::min(next, parked.deadline);
  return next;
}

}  // namespace ddp
