// Settings that every rank of a group must hold the same value of (bucket caps, the bucket layout, the
// comm hook, steps per epoch, ...), checked in one exchange so that a mistake made when starting ranks
// by hand is named at start-up instead of surfacing later as a backend crash, a hang, or buffers of
// different sizes reduced against each other (DDP does this at wrap time; train/train for its own
// settings).
#ifndef DDP_COMM_RANK_AGREEMENT_H_
#define DDP_COMM_RANK_AGREEMENT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "comm/process_group.h"

namespace ddp {

// One setting: its name (as the user knows it, e.g. "bucket_cap_mb") and this rank's value as text.
struct AgreedField {
  std::string name;
  std::string value;
};

// `fields` as bytes, each name and value length-prefixed (store/byte_codec.h), and back: DecodeAgreedFields
// appends to `fields` and returns false when `bytes` is not a whole encoding. Pure.
std::string EncodeAgreedFields(const std::vector<AgreedField>& fields);
bool DecodeAgreedFields(absl::string_view bytes, std::vector<AgreedField>* fields);

// Exchanges every rank's `fields` (one AllGatherObject, bounded by the group's timeout) and returns OK
// when every rank passed the same names and values in the same order. Otherwise returns, on every rank,
// the same FailedPrecondition error naming `what`, the first field that differs and its value on each
// rank, grouped, e.g.
//   DDP settings differ across ranks: bucket_cap_mb is 25 on ranks 0, 2 and 0 on rank 1
// A value longer than 200 characters is shown as its first 200 and its length. A failed exchange
// returns its error. Thread safety: a collective; every rank of `group` calls it at the same point.
absl::Status CheckRanksAgree(ProcessGroup& group, const std::vector<AgreedField>& fields, absl::string_view what);

}  // namespace ddp

#endif  // DDP_COMM_RANK_AGREEMENT_H_
