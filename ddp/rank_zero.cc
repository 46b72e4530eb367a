#include "ddp/rank_zero.h"

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace ddp {
namespace {

// The wire form of a status: "<code number>:<message>".
std::string EncodeStatus(const absl::Status& status) {
  return absl::StrCat(static_cast<int>(status.code()), ":", status.message());
}

absl::Status DecodeStatus(const std::string& data) {
  const size_t colon = data.find(':');
  int code = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(absl::string_view(data).substr(0, colon), &code) ||
      code < 0 || code > static_cast<int>(absl::StatusCode::kUnauthenticated)) {
    return absl::InternalError(absl::StrCat("RunOnRankZero: malformed status from rank 0: \"", data, "\""));
  }
  return absl::Status(static_cast<absl::StatusCode>(code), data.substr(colon + 1));
}

}  // namespace

absl::Status RunOnRankZero(ProcessGroup* group, const std::function<absl::Status()>& fn) {
  return group != nullptr ? RunOnRankZero(*group, fn) : fn();
}

absl::Status RunOnRankZero(ProcessGroup& group, const std::function<absl::Status()>& fn) {
  std::string data;
  absl::Status own;
  if (group.rank() == 0) {
    own = fn();
    if (!own.ok()) own = absl::Status(own.code(), absl::StrCat("rank 0: ", own.message()));
    data = EncodeStatus(own);
  }
  const absl::Status broadcast = group.BroadcastObject(&data, /*root=*/0);
  if (!broadcast.ok()) {
    return absl::Status(
        broadcast.code(),
        absl::StrCat("RunOnRankZero: broadcasting rank 0's result failed on rank ", group.rank(), ": ",
                     broadcast.message(), own.ok() ? "" : absl::StrCat(" (and ", own.message(), ")")));
  }
  return group.rank() == 0 ? own : DecodeStatus(data);
}

absl::Status SaveCheckpointCollective(ProcessGroup& group, const std::string& dir,
                                      const Checkpoint& checkpoint, const SaveCheckpointOptions& options) {
  return RunOnRankZero(group, [&] { return SaveCheckpoint(dir, checkpoint, options); });
}

}  // namespace ddp
