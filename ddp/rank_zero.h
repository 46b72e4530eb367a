// Rank-0-only work (saving a checkpoint, evaluating, printing) that cannot deadlock the other ranks
// when it fails: rank 0 runs the function, then its status is broadcast, so every rank returns the
// same status and all fail together instead of waiting forever in the next collective.
//
// Example:
//   DDP_RETURN_IF_ERROR(RunOnRankZero(group, [&] { return WriteReport(path); }));
//   DDP_RETURN_IF_ERROR(SaveCheckpointCollective(group, "/ckpt", checkpoint));
//
// Thread safety: like any collective, called by every rank of `group`, from one thread per rank, in the
// same order as the rank's other collectives.
#ifndef DDP_DDP_RANK_ZERO_H_
#define DDP_DDP_RANK_ZERO_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "comm/process_group.h"
#include "checkpoint/checkpoint.h"

namespace ddp {

// Runs `fn` on rank 0 only; every rank then returns rank 0's status: OK, or the same code with the
// message "rank 0: <fn's message>". Ranks other than 0 wait in a BroadcastObject, which is bounded by
// the group's timeout: if rank 0 dies or never arrives they get the broadcast's error instead. A failed
// broadcast on rank 0 is reported there (together with fn's own error, if any). `fn` is not called on
// other ranks (it may be empty there).
absl::Status RunOnRankZero(ProcessGroup& group, const std::function<absl::Status()>& fn);

// The same for code that runs with or without a group: `group` null (one process) calls `fn` directly.
absl::Status RunOnRankZero(ProcessGroup* group, const std::function<absl::Status()>& fn);

// SaveCheckpoint(dir, checkpoint, options) on rank 0 through RunOnRankZero: the other ranks wait for
// it and return its error if it fails. `checkpoint` is only read on rank 0.
absl::Status SaveCheckpointCollective(ProcessGroup& group, const std::string& dir,
                                      const Checkpoint& checkpoint,
                                      const SaveCheckpointOptions& options = {});

}  // namespace ddp

#endif  // DDP_DDP_RANK_ZERO_H_
