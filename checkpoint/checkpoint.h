// Training checkpoints: everything needed to resume a run exactly (model, optimizer state, sampler
// position, RNG state, step and epoch), written atomically with a manifest of checksums and verified
// when read. Saving from a distributed job goes through SaveCheckpointCollective (ddp/rank_zero.h):
// rank 0 writes, the others wait and get rank 0's error if it fails.
//
// Layout of a checkpoint directory `dir` (Note [Checkpoint atomicity] in checkpoint.cc):
//   dir/step-<N>/model.safetensors      Module::StateDict() (parameters and buffers, dotted names)
//   dir/step-<N>/optimizer.safetensors  OptimizerState::tensors ("<index>.<field>")
//   dir/step-<N>/manifest.json          step, epoch, sampler state, RNG state, optimizer step count,
//                                       the named extra state of the layers above (e.g. DDP's bucket
//                                       order), size and FNV-1a 64 checksum of each file and of each
//                                       tensor, and a checksum of the manifest itself
//   dir/latest                          "step-<N>": the newest complete checkpoint
// A checkpoint becomes visible only once complete: it is written into dir/.tmp-step-<N>, every file
// and the directory are fsynced, it is renamed to dir/step-<N>, and dir/latest is replaced atomically.
// Any failure leaves the previous checkpoint and dir/latest untouched.
//
// Example:
//   Checkpoint ckpt = CaptureCheckpoint(*model, &optimizer, sampler->State(consumed), &generator,
//                                       step, epoch);
//   DDP_RETURN_IF_ERROR(SaveCheckpointCollective(group, "/ckpt", ckpt));   // ddp/rank_zero.h
//   ...
//   absl::StatusOr<Checkpoint> loaded = LoadLatestCheckpoint("/ckpt");
//   if (absl::IsNotFound(loaded.status())) { /* fresh start */ }
//   DDP_RETURN_IF_ERROR(ApplyCheckpoint(*loaded, {model.get(), &optimizer, &generator}));
//   DDP_RETURN_IF_ERROR(sampler->Restore(loaded->sampler));
//
// Error policy: every I/O failure is a Status naming the path and errno text, with io/file.h's codes
// (NotFound, PermissionDenied, ResourceExhausted, ... from the errno); every integrity failure
// (missing, truncated or corrupt file, checksum, name, shape or dtype mismatch) is a DataLoss Status
// naming the file and, where there is one, the tensor. Nothing here aborts on bad input.
// Thread safety: the functions share no state; concurrent calls on different directories are safe.
#ifndef DDP_CHECKPOINT_CHECKPOINT_H_
#define DDP_CHECKPOINT_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/sampler.h"
#include "nn/module.h"
#include "nn/optimizer.h"
#include "tensor/random.h"

namespace ddp {

// Everything a checkpoint holds. Tensors read back by LoadCheckpoint are contiguous CPU tensors.
struct Checkpoint {
  NamedTensors model;        // Module::StateDict() (may share data with the module when captured)
  OptimizerState optimizer;  // Optimizer::StateDict(); empty when there is no optimizer
  SamplerState sampler;      // DistributedSampler::State(consumed)
  std::string rng_state;     // Generator::SaveState(); empty when there is none
  // State the layers above own, by name (DDP's bucket order, --bucket_cap_mb=auto's choice, ...): each an
  // opaque string that its owner encodes, decodes and validates; this layer stores it in the manifest
  // (covered by the manifest's checksum) and knows nothing of its meaning. Names are not empty.
  std::map<std::string, std::string> extra_state;
  int64_t step = 0;          // optimizer steps taken; names the directory ("step-<step>"). >= 0.
  int64_t epoch = 0;
  // Set by LoadCheckpoint: the directory it was read from (error messages name files in it).
  std::string source;
};

// Builds a Checkpoint from live training objects. `optimizer` and `generator` may be null. The model
// tensors share data with `module` (no copy): save before the next optimizer step changes them.
Checkpoint CaptureCheckpoint(const Module& module, const Optimizer* optimizer, const SamplerState& sampler,
                             const Generator* generator, int64_t step, int64_t epoch);

struct SaveCheckpointOptions {
  // After a successful save, delete all but the newest `keep_last` step-* directories (never the one
  // dir/latest names). 0: keep every checkpoint.
  int keep_last = 0;
  // Whether an existing dir/step-<N> may be replaced. false: it is an AlreadyExists error naming it, and
  // nothing is written (a checkpoint of another run at the same step stays whole). A directory that
  // appears while the checkpoint is written is never replaced either: the final rename fails.
  bool replace_existing = true;
};

// Writes `checkpoint` as dir/step-<checkpoint.step> and points dir/latest at it (see the layout above).
// Creates `dir` (and its parents) when missing. An existing dir/step-<N> is replaced only after the new one
// is complete, and only with options.replace_existing. Errors name the path that failed (read-only directory,
// disk full, a file where a directory is expected, ...); on error the previous checkpoint and dir/latest are
// unchanged and the temporary directory is removed. An extra_state entry with an empty name is an
// InvalidArgument error; nothing is written. REQUIRES: checkpoint.step >= 0.
absl::Status SaveCheckpoint(const std::string& dir, const Checkpoint& checkpoint,
                            const SaveCheckpointOptions& options = {});

// Reads and verifies the checkpoint directory `path` (a dir/step-<N>): the manifest's own checksum,
// each file's size and checksum, and each tensor's name, dtype, shape and checksum against the
// manifest. Errors (DataLoss) name the file and, where there is one, the tensor or the manifest field.
// Manifests that keep DDP's bucket order or --bucket_cap_mb=auto's record as fields of their own
// ("ddp_bucket_order", "auto_bucket_caps": the layout before extra state had names) load with them as
// extra_state entries of those names (the record as its JSON text).
absl::StatusOr<Checkpoint> LoadCheckpoint(const std::string& path);

// The directory dir/latest names (dir/step-<N>). NotFound when dir/latest does not exist (no
// checkpoint yet: a fresh start); DataLoss when it is malformed.
absl::StatusOr<std::string> LatestCheckpointPath(const std::string& dir);

// LoadCheckpoint(LatestCheckpointPath(dir)). NotFound when there is no checkpoint yet.
absl::StatusOr<Checkpoint> LoadLatestCheckpoint(const std::string& dir);

// The steps N of the dir/step-<N> directories, newest first, complete or not (dir/.tmp-step-<N> and
// other names are not steps). Empty when `dir` does not exist; an error naming `dir` when it cannot be
// read (e.g. it is a file).
absl::StatusOr<std::vector<int64_t>> ListCheckpointSteps(const std::string& dir);

// What FindNewestCheckpoint found, and how.
struct FoundCheckpoint {
  Checkpoint checkpoint;  // loaded and verified (LoadCheckpoint)
  // Empty when dir/latest named this checkpoint and nothing newer was skipped. Otherwise why a scan
  // chose it, for the log: "<dir>/latest does not exist" (or "names step-9, which does not exist", or
  // "is malformed: ...", or "names step-4") "; took step-7, the newest complete step", followed by
  // "; skipped step-8: <LoadCheckpoint's error>" for each newer step that did not verify.
  std::string scan_note;
};

// The newest complete checkpoint in `dir`, for resuming (Note [Finding the newest checkpoint] in
// checkpoint.cc): the step-<N> directories are tried newest first, and the first whose manifest and
// files verify (LoadCheckpoint) is taken. Normally that is the one dir/latest names; a scan also finds
// it when dir/latest is missing, malformed or names a missing step, or when a crash came between
// publishing a step and updating dir/latest. NotFound when `dir` holds no step-<N> directory (a fresh
// start); DataLoss, naming each step and its error, when there are some but none verifies.
absl::StatusOr<FoundCheckpoint> FindNewestCheckpoint(const std::string& dir);

// Deletes the dir/step-<N> directories with N > `step`, and dir/latest when it names one of them (or
// nothing that exists), so that the next SaveCheckpoint of a step <= those leaves a consistent
// directory. Returns the names removed, oldest first. Errors name the path that could not be removed.
// REQUIRES: nobody writes checkpoints into `dir` at the same time.
absl::StatusOr<std::vector<std::string>> RemoveCheckpointsAfter(const std::string& dir, int64_t step);

// Where ApplyCheckpoint puts the state; null members are skipped. Not owned.
struct CheckpointTargets {
  Module* module = nullptr;
  Optimizer* optimizer = nullptr;
  Generator* generator = nullptr;
};

// Copies the checkpoint into live objects: module values in place (each tensor keeps its device, so
// every rank places the state on its own device), the optimizer state, the generator state. Names,
// shapes and dtypes are checked against the module and optimizer; an error names the file
// (checkpoint.source/model.safetensors, .../optimizer.safetensors, .../manifest.json) and the tensor,
// and leaves the module and optimizer unchanged. The sampler state is the caller's
// (DistributedSampler::Restore(checkpoint.sampler)).
absl::Status ApplyCheckpoint(const Checkpoint& checkpoint, const CheckpointTargets& targets);

}  // namespace ddp

#endif  // DDP_CHECKPOINT_CHECKPOINT_H_
