// Nothing overwritten, nothing lost at the end: the checks train/train makes before
// its first step, so that a bad output path or a checkpoint directory that already holds another run's
// checkpoints fails at once, instead of after the run with its work lost. The trainer calls them on the rank
// that writes each output (rank 0 under DDP, through RunOnRankZero, so its error reaches every rank at once).
//
// Example:
//   DDP_RETURN_IF_ERROR(ProbeRankZeroOutputs(config, /*writes_trace=*/ddp != nullptr));
//   ...resume...
//   DDP_RETURN_IF_ERROR(GuardExistingCheckpoints(config, start_step));
//
// Errors are absl::Status values whose message names the flag and the path and, for a failed system
// call, the errno text, with the errno's code (io/file.h). Thread safety: the functions share no state.
#ifndef DDP_TRAIN_OUTPUT_GUARD_H_
#define DDP_TRAIN_OUTPUT_GUARD_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "train/train_config.h"

namespace ddp {

// How an output file gets written, which decides what must be allowed.
enum class OutputWrite {
  kReplaced,  // written beside it and renamed over it (WriteFileAtomically: --save, --dump_grads)
  kInPlace,   // opened where it is and written or appended to (--metrics_out, --trace_out)
};

// OK when `path` can be written as `how` says. The file written is `path`, or through symbolic links
// the file it points to (ResolveOutputFile, io/file.h: as torch.save and shell redirection); that file
// must be a regular file or not exist yet (a device node such as /dev/null, a FIFO, a socket or a
// directory is refused by name), its directory must exist and take a new file, and (kInPlace) an
// existing file must open for writing. Creates and removes a probe file beside the file
// ("<file>.probe-XXXXXX"); changes nothing else (an existing file keeps its contents). Errors read
// "--<flag>=<path>: cannot create files in <dir>: No such file or directory", or
// "--save=/dev/null: cannot write /dev/null: it is a character device, not a regular file".
absl::Status ProbeOutputFile(absl::string_view flag, const std::string& path, OutputWrite how);

// OK when `dir` can hold checkpoints (SaveCheckpoint creates it and its parents): `dir` is a directory
// that takes a new file, or it is missing and its nearest existing ancestor is such a directory.
// Creates and removes a probe file there; creates no directory. Errors name the flag, `dir` and errno.
absl::Status ProbeOutputDirectory(absl::string_view flag, const std::string& dir);

// Probes every output rank 0 writes: --save and --dump_grads (kReplaced), --metrics_out (kInPlace),
// --trace_out (kInPlace; only when `writes_trace`: the trace exists under DDP only) and --checkpoint_dir
// (when --checkpoint_every > 0). Empty flags are skipped. The first failure is returned.
absl::Status ProbeRankZeroOutputs(const TrainConfig& config, bool writes_trace);

// Before a run that can save checkpoints (any run with --checkpoint_dir: every --checkpoint_every steps, and
// once when a SIGTERM stops it) starts at optimizer step `start_step` (0, or the step --resume took): the
// step-<N> directories of --checkpoint_dir with N > start_step would be overwritten, or left newer than the
// run's own checkpoints (a later --resume would take them). Without --overwrite_checkpoints that is an
// AlreadyExists error naming the directory and the steps; with it they are removed (RemoveCheckpointsAfter)
// and named on stderr. OK when the run saves no checkpoint (no --checkpoint_dir) or there are no such steps.
absl::Status GuardExistingCheckpoints(const TrainConfig& config, int64_t start_step);

// Appends `line` and a newline to the file at `path` (created when missing; through symbolic links; a
// path that is not a regular file is refused as by ProbeOutputFile). Errors name the path and the errno
// text.
absl::Status AppendLine(const std::string& path, const std::string& line);

}  // namespace ddp

#endif  // DDP_TRAIN_OUTPUT_GUARD_H_
