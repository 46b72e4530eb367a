// --resume in train/train (contracts: train/resume.h).
#include "train/resume.h"

#include <cstdio>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "ddp/distributed_data_parallel.h"
#include "ddp/zero_redundancy_optimizer.h"
#include "nn/grad_scaler.h"
#include "train/auto_bucket_caps.h"
#include "train/auto_bucket_caps_record.h"
#include "train/autocast_record.h"
#include "train/data_record.h"
#include "train/state_agreement.h"

namespace ddp {
namespace {

// The extra state `name` of `checkpoint` ("" when it has none).
std::string ExtraState(const Checkpoint& checkpoint, const std::string& name) {
  const auto it = checkpoint.extra_state.find(name);
  return it == checkpoint.extra_state.end() ? "" : it->second;
}

// --resume under DDP: every rank must continue from the same step of the same run. Each rank's resume
// point (the checkpoint's step, epoch and sampler position, and the fingerprint of the state it loaded; a
// fresh start; or its error) is compared in one exchange before anything else of the resume
// communicates; a difference is named on every rank with each rank's checkpoint. A rank that failed on
// its own shows its error to the others instead of leaving them waiting.
absl::Status CheckSameResumePoint(const TrainConfig& config, const absl::StatusOr<FoundCheckpoint>& found,
                                  const absl::Status& applied, const TrainState& state) {
  std::string key, detail;
  if (absl::IsNotFound(found.status())) {
    key = "fresh";
    detail = absl::StrCat("no checkpoint in ", config.checkpoint_dir, ", a fresh start");
  } else if (!applied.ok()) {
    key = absl::StrCat("error: ", applied.ToString());
    detail = absl::StrCat("cannot resume: ", applied.ToString());
  } else {
    const Checkpoint& c = found->checkpoint;
    const std::string fingerprint = FingerprintText(ModuleStateFingerprint(state.model));
    key = absl::StrCat(c.step, " ", c.epoch, " ", c.sampler.consumed, " ", fingerprint);
    detail = absl::StrCat("step ", c.step, " (epoch ", c.epoch, ", ", c.sampler.consumed,
                          " samples of it) from ", c.source, " (state ", fingerprint, ")");
  }
  return CheckRanksHoldTheSame(*state.group, "--resume: the ranks would continue from different points", key,
                               detail);
}

}  // namespace

absl::StatusOr<int> ResumeFromNewest(const TrainConfig& config, TrainState& state) {
  absl::StatusOr<FoundCheckpoint> found = FindNewestCheckpoint(config.checkpoint_dir);
  absl::Status applied = found.status();
  std::string data_note;  // Note [Data record]: another data set is refused before anything is loaded
  if (found.ok()) {
    applied = CheckResumeData(ExtraState(found->checkpoint, kDataStateName), found->checkpoint.source, config,
                              &data_note);
  }
  if (found.ok() && applied.ok()) {
    applied = ApplyCheckpoint(found->checkpoint, CheckpointTargets{&state.model, &state.optimizer, nullptr});
  }
  if (state.group != nullptr) DDP_RETURN_IF_ERROR(CheckSameResumePoint(config, found, applied, state));
  if (absl::IsNotFound(found.status())) {
    if (state.rank == 0) {
      std::fprintf(stderr, "--resume: no checkpoint in %s yet (no step-N directory), starting fresh\n",
                   config.checkpoint_dir.c_str());
    }
    return 1;
  }
  DDP_RETURN_IF_ERROR(applied);
  const Checkpoint& checkpoint = found->checkpoint;
  // The same buckets as before the interruption: the same rounding (Reducer::RebuiltOrderText).
  if (state.ddp != nullptr) {
    DDP_RETURN_IF_ERROR(state.ddp->RestoreBucketOrder(ExtraState(checkpoint, kBucketOrderStateName)));
  }
  // --zero: shards follow the restored buckets from the first step, as they did before the interruption.
  if (state.zero != nullptr)
    DDP_RETURN_IF_ERROR(state.zero->Reshard(state.ddp->reducer().bucket_assignment()));
  // --grad_scaler: the scale and growth tracker where the run left them (a checkpoint saved without a
  // scaler leaves the scaler at its initial scale).
  if (state.scaler != nullptr) {
    if (const std::string text = ExtraState(checkpoint, kGradScalerStateName); !text.empty()) {
      const absl::Status restored = state.scaler->RestoreState(text);
      if (!restored.ok()) {
        return absl::Status(restored.code(), absl::StrCat(checkpoint.source, ": ", restored.message()));
      }
    }
  }
  state.global_step = checkpoint.step;
  state.resume_from = checkpoint.sampler;
  const int epoch = static_cast<int>(checkpoint.epoch);
  if (state.rank == 0) {
    if (!found->scan_note.empty()) std::fprintf(stderr, "--resume: %s\n", found->scan_note.c_str());
    std::fprintf(stderr, "resuming from %s: step %lld, epoch %d, %lld samples of the epoch consumed\n",
                 checkpoint.source.c_str(), static_cast<long long>(checkpoint.step), epoch,
                 static_cast<long long>(checkpoint.sampler.consumed));
    if (!data_note.empty()) std::fprintf(stderr, "%s\n", data_note.c_str());
  }
  // The bf16 kernel the checkpoint's steps ran, kept where it can be (Note [Autocast record]).
  DDP_RETURN_IF_ERROR(ApplyAutocastRecord(ExtraState(checkpoint, kAutocastStateName), checkpoint.source,
                                          config, state.rank == 0));
  // --bucket_cap_mb=auto: the caps chosen before the interruption, if they were chosen for this world size
  // and backend, instead of measuring again (Note [Auto bucket caps] step 4); after the restored bucket
  // order, before the first step. With a fixed --bucket_cap_mb there is no controller and the record is
  // ignored: the flag says which caps the user wants.
  if (state.auto_caps != nullptr) {
    std::optional<AutoBucketCapsRecord> saved;
    if (const std::string text = ExtraState(checkpoint, kAutoBucketCapsStateName); !text.empty()) {
      DDP_ASSIGN_OR_RETURN(saved, DecodeAutoBucketCapsRecord(text, checkpoint.source + "/manifest.json"));
    }
    DDP_RETURN_IF_ERROR(state.auto_caps->ResumeFrom(saved, checkpoint.source));
  }
  return epoch;
}

}  // namespace ddp
