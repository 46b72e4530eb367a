#include "store/store_server_state.h"

#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/check.h"
#include "base/describe_bytes.h"
#include "store/store.h"

namespace ddp {
namespace {

std::optional<StoreServerState::Reply> ErrorReply(const absl::Status& status) {
  return StoreServerState::Reply{ResponseFromStatus(status), nullptr};
}

int64_t SizeOf(const std::string& s) { return static_cast<int64_t>(s.size()); }

}  // namespace

StoreServerState::StoreServerState(int64_t max_held_bytes) : max_held_bytes_(max_held_bytes) {
  DDP_CHECK(max_held_bytes > 0) << "store cap " << max_held_bytes;
}

absl::Status StoreServerState::CheckRoom(absl::string_view what, absl::string_view key, int64_t added) const {
  int64_t freed = 0;
  if (!key.empty()) {
    KvTable::Value current = table_.Share(key);
    if (current == nullptr) {
      added += static_cast<int64_t>(key.size());
    } else if (current.use_count() == 2) {  // the table's and ours: nobody is still sending it
      freed = SizeOf(*current);
    }
  }
  const int64_t after = held_bytes() - freed + added;
  if (after <= max_held_bytes_) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "the TCP store is full: ", what, " (", DescribeBytes(added), ") would bring what its server holds to ",
      DescribeBytes(after), ", above its cap of ", DescribeBytes(max_held_bytes_),
      " (keys, values and waiting requests; DDP_STORE_MAX_BYTES sets it where the server starts)"));
}

std::optional<StoreServerState::Reply> StoreServerState::Handle(int64_t connection, StoreRequest request,
                                                                absl::Time now) {
  Reply reply;
  switch (request.op) {
    case StoreOp::kSet: {
      const std::string& key = request.keys[0];
      const absl::Status room =
          CheckRoom(absl::StrCat("Set of key '", absl::CHexEscape(key.substr(0, 200)), "'"), key, SizeOf(request.value));
      if (!room.ok()) return ErrorReply(room);
      table_.SetOwned(key, std::move(request.value));
      written_since_check_ = true;
      return reply;
    }
    case StoreOp::kAdd: {
      const std::string& key = request.keys[0];
      const absl::Status room = CheckRoom(absl::StrCat("Add to key '", absl::CHexEscape(key.substr(0, 200)), "'"),
                                          key, /*the decimal sum*/ 20);
      if (!room.ok()) return ErrorReply(room);
      absl::StatusOr<int64_t> sum = table_.Add(key, request.number);
      if (!sum.ok()) return ErrorReply(sum.status());
      written_since_check_ = true;
      reply.response.number = *sum;
      return reply;
    }
    case StoreOp::kCompareSet:
      return HandleCompareSet(request);
    case StoreOp::kDeleteKey:
      reply.response.number = table_.Delete(request.keys[0]) ? 1 : 0;
      return reply;
    case StoreOp::kNumKeys:
      reply.response.number = table_.size();
      return reply;
    case StoreOp::kGet:
    case StoreOp::kWait:
      break;
    case StoreOp::kHello:
      return ErrorReply(absl::FailedPreconditionError("unexpected second hello"));
  }
  DDP_CHECK(!parked_.contains(connection)) << "connection " << connection << " already waits";
  const absl::Duration timeout = TimeoutFromMs(request.number);
  Parked parked{request.op, std::move(request.keys), timeout, now + timeout, 0};
  if (table_.Missing(parked.keys).empty()) return Satisfied(parked);
  for (const std::string& key : parked.keys) parked.key_bytes += SizeOf(key);
  const absl::Status room = CheckRoom(parked.op == StoreOp::kGet ? "a waiting Get" : "a waiting Wait", "",
                                      parked.key_bytes);
  if (!room.ok()) return ErrorReply(room);
  parked_key_bytes_ += parked.key_bytes;
  parked_.emplace(connection, std::move(parked));
  return std::nullopt;
}

std::optional<StoreServerState::Reply> StoreServerState::HandleCompareSet(StoreRequest& request) {
  const std::string& key = request.keys[0];
  KvTable::Value current = table_.Share(key);
  const bool swap = (current == nullptr && request.value.empty()) ||
                    (current != nullptr && *current == request.value);
  Reply reply;
  if (swap) {
    current.reset();  // so that CheckRoom sees whether anybody else still holds it
    const absl::Status room = CheckRoom(absl::StrCat("CompareSet of key '", absl::CHexEscape(key.substr(0, 200)), "'"),
                                        key, SizeOf(request.desired));
    if (!room.ok()) return ErrorReply(room);
    table_.SetOwned(key, std::move(request.desired));
    written_since_check_ = true;
    reply.value = table_.Share(key);
  } else if (current == nullptr) {  // Store::CompareSet answers `expected` for a missing key
    const absl::Status room = CheckRoom("CompareSet's answer", "", SizeOf(request.value));
    if (!room.ok()) return ErrorReply(room);
    reply.value = table_.MakeValue(std::move(request.value));
  } else {
    reply.value = std::move(current);
  }
  return reply;
}

StoreServerState::Reply StoreServerState::Satisfied(const Parked& parked) const {
  Reply reply;
  if (parked.op == StoreOp::kGet) reply.value = table_.Share(parked.keys[0]);
  return reply;
}

void StoreServerState::Forget(absl::flat_hash_map<int64_t, Parked>::iterator it) {
  parked_key_bytes_ -= it->second.key_bytes;
  parked_.erase(it);
}

void StoreServerState::Cancel(int64_t connection) {
  auto it = parked_.find(connection);
  if (it != parked_.end()) Forget(it);
}

std::vector<StoreServerState::Completion> StoreServerState::TakeCompletions(absl::Time now) {
  std::vector<Completion> done;
  const bool check_keys = written_since_check_;
  written_since_check_ = false;
  for (auto it = parked_.begin(); it != parked_.end();) {
    const Parked& parked = it->second;
    const bool expired = parked.deadline <= now;
    std::vector<std::string> missing;
    if (check_keys || expired) missing = table_.Missing(parked.keys);
    if ((check_keys || expired) && missing.empty()) {
      done.push_back({it->first, Satisfied(parked)});
    } else if (expired) {
      const char* op = parked.op == StoreOp::kGet ? "Get" : "Wait";
      done.push_back({it->first, {ResponseFromStatus(StoreTimeoutError(op, missing, parked.timeout)), nullptr}});
    } else {
      ++it;
      continue;
    }
    Forget(it++);
  }
  return done;
}

absl::Time StoreServerState::NextDeadline() const {
  absl::Time next = absl::InfiniteFuture();
  for (const auto& [connection, parked] : parked_) next = std::min(next, parked.deadline);
  return next;
}

}  // namespace ddp
