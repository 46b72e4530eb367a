// What every rank of train/train must share, checked at start-up in one exchange, before anything else
// communicates (Note [Train settings agreement] in settings_agreement.cc).
//
// Example:
//   DDP_RETURN_IF_ERROR(CheckSettingsAgree(*group, config));  // right after InitProcessGroup
//
// Thread safety: SettingsToAgree is pure; CheckSettingsAgree is a collective (every rank of the group
// calls it at the same point).
#ifndef DDP_TRAIN_SETTINGS_AGREEMENT_H_
#define DDP_TRAIN_SETTINGS_AGREEMENT_H_

#include <vector>

#include "absl/status/status.h"
#include "comm/process_group.h"
#include "comm/rank_agreement.h"
#include "train/train_config.h"

namespace ddp {

// The flags of `config` that must be the same on every rank, each as {"--name", value}: --eval_only
// first, then what the run does (--model, --dataset, --device, and unless --eval_only the training, DDP,
// checkpoint and testing flags that change which collectives run or which numbers are computed), then
// for each output flag and --init_from whether it is given ("given" / "not given": rank 0 writes every
// output, so a path given to another rank only would silently never be written). Numbers are compared
// exactly, as the shortest text that reads back as the value ("0.01" and "0.010" agree). Flags that may
// differ per rank (--data_dir, --threads, --adapt_threads, --num_workers, --eval_batch_size, --backend,
// --print_buckets, the output paths themselves) are not in it. Pure. REQUIRES: ValidateConfig(config) is OK.
std::vector<AgreedField> SettingsToAgree(const TrainConfig& config);

// CheckRanksAgree over SettingsToAgree(config): OK, or on every rank the same FailedPrecondition naming
// the first flag that differs and its value on each rank, e.g.
//   train/train settings differ across ranks: --sync_bn is false on rank 0 and true on rank 1
// Collective, bounded by the group's timeout.
absl::Status CheckSettingsAgree(ProcessGroup& group, const TrainConfig& config);

}  // namespace ddp

#endif  // DDP_TRAIN_SETTINGS_AGREEMENT_H_
