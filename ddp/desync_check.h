// Desync detection (which PyTorch lacks): checks that every rank's replica holds bit-identical
// parameters and buffers, and names the first tensor that diverged and the ranks that differ. Replicas
// drift apart through nondeterministic kernels, a rank that skipped a step, or a buffer updated locally
// (e.g. BatchNorm statistics with broadcast_buffers off); the loss often hides it for many steps.
//
// Cost: one FNV-1a pass over every parameter and buffer (copied to the host when on a device) and one
// AllGatherObject of 8 bytes plus the name per tensor. Run it every N steps, not every step:
//   DDP_RETURN_IF_ERROR(MaybeCheckReplicasInSync(*model, group, step, /*every_n_steps=*/100));
//
// Under DDP with broadcast_buffers (the default) buffers are not compared: every training forward
// overwrites each rank's buffers with rank 0's and then updates BatchNorm's running statistics from the
// local batch, so between forwards they legitimately differ (DesyncCheckOptions::compare_buffers).
//
// Thread safety: a collective; every rank of `group` calls it at the same point of training.
#ifndef DDP_DDP_DESYNC_CHECK_H_
#define DDP_DDP_DESYNC_CHECK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "comm/process_group.h"
#include "nn/module.h"

namespace ddp {

// What the check compares.
struct DesyncCheckOptions {
  // Compare buffers as well as parameters. Set it to false when the next training forward overwrites
  // the buffers with rank 0's (DDP's broadcast_buffers, the default); a buffer that is never
  // re-broadcast (broadcast_buffers off, or a module outside DDP) must be compared.
  bool compare_buffers = true;
};

// The checksum of each tensor of module.StateDict() (parameters, then buffers, module by module), in
// order: FNV-1a 64 over its dtype, shape and contiguous bytes. Pure apart from reading the tensors.
std::vector<std::pair<std::string, uint64_t>> StateChecksums(const Module& module);

// OK when every rank's StateChecksums are equal (parameters only, unless options.compare_buffers).
// Otherwise, on every rank, the same
// FailedPrecondition error naming the first tensor (in rank 0's order) that differs, whether it is a
// parameter or buffer, and the ranks whose value differs from rank 0's, e.g.
//   replicas out of sync: parameter "fc1.weight" differs from rank 0's on rank 2
// Different tensor names or counts are reported the same way. A failed collective returns its error.
absl::Status CheckReplicasInSync(const Module& module, ProcessGroup& group,
                                 const DesyncCheckOptions& options = {});

// CheckReplicasInSync when every_n_steps > 0 and step % every_n_steps == 0; OK otherwise.
absl::Status MaybeCheckReplicasInSync(const Module& module, ProcessGroup& group, int64_t step,
                                      int64_t every_n_steps, const DesyncCheckOptions& options = {});

}  // namespace ddp

#endif  // DDP_DDP_DESYNC_CHECK_H_
