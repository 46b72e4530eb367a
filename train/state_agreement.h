// What the ranks of train/train load must be the same on every rank: the data (each node may read its own
// copy), the weights --eval_only evaluates (--init_from), the checkpoint --resume continues from. A stale
// copy of a file on one node, or a checkpoint directory that one node saw fewer steps of, would otherwise
// blend into a wrong result reported as a success (evaluation), or leave the ranks in different steps (a
// hang).
//
// Example:
//   DDP_RETURN_IF_ERROR(CheckRanksHoldTheSame(group, "--eval_only: the ranks loaded different weights",
//                                             FingerprintText(ModuleStateFingerprint(model)), detail));
//
// Thread safety: ModuleStateFingerprint and FingerprintText are pure; CheckRanksHoldTheSame is a
// collective (every rank of the group calls it at the same point).
#ifndef DDP_TRAIN_STATE_AGREEMENT_H_
#define DDP_TRAIN_STATE_AGREEMENT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "comm/process_group.h"
#include "data/image_dataset.h"
#include "nn/module.h"

namespace ddp {

// One FNV-1a 64 checksum of everything `module` holds: the names, dtypes, shapes and bytes of its
// parameters and buffers (StateChecksums, ddp/desync_check.h), in order. Equal modules give equal
// fingerprints; device tensors are copied to the host.
uint64_t ModuleStateFingerprint(const Module& module);

// `fingerprint` as 16 hex digits.
std::string FingerprintText(uint64_t fingerprint);

// Exchanges every rank's `key` and `detail` (one AllGatherObject, bounded by the group's timeout). OK
// when every rank's key is the same; otherwise, on every rank, the same FailedPrecondition error
// "<what>: <ranks>: <detail>; <ranks>: <detail>", one part per distinct key in the order of its first
// rank, showing the detail of that first rank, e.g.
//   --eval_only: the ranks loaded different weights: rank 0: --init_from=/a/w (state 1f..); rank 1: ...
// A failed exchange returns its error prefixed with `what`.
absl::Status CheckRanksHoldTheSame(ProcessGroup& group, absl::string_view what, const std::string& key,
                                   const std::string& detail);

// What one process loaded from its `folder` (--data_dir may differ per rank: each node reads its own
// copy): the training set (null: none, --eval_only) and the test set, by their sizes and
// ImageDataset::Fingerprint. `key` (hex) is equal exactly when those are; `detail` names the folder, the
// sizes and the key, e.g. "/data (50000 training, 10000 test images; data 1f..)". Pure.
struct LoadedData {
  std::string key, detail;
};
LoadedData DescribeLoadedData(const std::string& folder, const ImageDataset* train, const ImageDataset& test);

// CheckRanksHoldTheSame over what every rank loaded (DescribeLoadedData). A node whose copy differs (older,
// cut short at a record boundary, other files under the same names) would train its shard on other images
// or blend another test set into the reported accuracy; instead every rank fails with, e.g.,
//   the ranks loaded different data: rank 0: /data (50000 training, 10000 test images; data 1f..);
//   rank 1: /mnt/data (49990 training, 10000 test images; data 7a..)
absl::Status CheckRanksLoadedTheSameData(ProcessGroup& group, const LoadedData& loaded);

}  // namespace ddp

#endif  // DDP_TRAIN_STATE_AGREEMENT_H_
