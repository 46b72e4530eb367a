// The record of --bucket_cap_mb=auto's choice (train/auto_bucket_caps.h, Note [Auto bucket caps]) as a
// checkpoint keeps it: a named extra-state entry (checkpoint/checkpoint.h: Checkpoint::extra_state) whose
// text is a JSON object, so that a resumed run can reuse the choice instead of measuring again.
#ifndef DDP_TRAIN_AUTO_BUCKET_CAPS_RECORD_H_
#define DDP_TRAIN_AUTO_BUCKET_CAPS_RECORD_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ddp {

// The extra-state name of the record: "auto_bucket_caps".
inline constexpr char kAutoBucketCapsStateName[] = "auto_bucket_caps";

// The caps --bucket_cap_mb=auto chose and what they were chosen for.
struct AutoBucketCapsRecord {
  double first_bucket_cap_mib = 0;  // >= 0; +infinity: no cap (one bucket)
  double bucket_cap_mib = 0;        // >= 0; +infinity: no cap (one bucket)
  int world_size = 0;               // the ranks the choice was made for (>= 1)
  std::string backend;              // ProcessGroup::backend_name() it was made over ("gloo", "shm", ...)
  double predicted_step_s = -1;     // the simulator's step time for these caps; < 0: not known
  double measured_step_s = -1;      // the mean step time measured under them; < 0: not measured yet
};

// The record as JSON text: caps in MiB ("inf" for no cap: JSON has no infinity), the step times only when
// known. An invalid record (a negative or NaN cap, world_size < 1, an empty backend) is an
// InvalidArgument error naming the field ("\"auto_bucket_caps.world_size\" must be >= 1, got 0").
absl::StatusOr<std::string> EncodeAutoBucketCapsRecord(const AutoBucketCapsRecord& record);

// Parses EncodeAutoBucketCapsRecord's text read from `where` (the file it came from). Errors (DataLoss)
// read "checkpoint file <where>: \"auto_bucket_caps.<field>\" <problem>".
absl::StatusOr<AutoBucketCapsRecord> DecodeAutoBucketCapsRecord(absl::string_view text, const std::string& where);

}  // namespace ddp

#endif  // DDP_TRAIN_AUTO_BUCKET_CAPS_RECORD_H_
