// Communication hooks: how a bucket's gradients are reduced across ranks (PyTorch's
// register_comm_hook). The Reducer hands each full bucket to its hook; built-ins: plain all-reduce
// (the default), fp16 compression and bf16 compression.
#ifndef DDP_REDUCER_COMM_HOOK_H_
#define DDP_REDUCER_COMM_HOOK_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "comm/process_group.h"
#include "tensor/tensor.h"

namespace ddp {

// What a hook sees of one bucket.
struct GradBucket {
  int index = 0;      // launch order within the iteration
  Tensor buffer;      // flat, contiguous: every gradient of the bucket, already divided by world size
};

// Reduces buckets. Implementations must be usable from the thread running backward and must not
// block it on communication: RunHook starts the reduction and returns a Work; when Work::Wait returns
// OK, `bucket.buffer` holds the sum over ranks of every rank's buffer (i.e. the average gradient).
// Every rank must use the same hook.
class CommHook {
 public:
  virtual ~CommHook() = default;
  virtual std::shared_ptr<Work> RunHook(ProcessGroup& group, const GradBucket& bucket) = 0;
  // "allreduce", "fp16", "bf16".
  virtual std::string name() const = 0;
};

// The default: an in-place sum all-reduce of the bucket.
class AllReduceHook : public CommHook {
 public:
  std::shared_ptr<Work> RunHook(ProcessGroup& group, const GradBucket& bucket) override;
  std::string name() const override { return "allreduce"; }
};

// Compresses the bucket to a 16-bit float type, all-reduces that (half the bytes on the wire), and
// decompresses into the bucket when the Work is waited on. Error: one rounding of each rank's value
// to 16 bits plus rounding of the partial sums (float16: ~1e-3 relative; bfloat16: ~1e-2).
class CompressionHook : public CommHook {
 public:
  // REQUIRES: dtype is kFloat16 or kBFloat16.
  explicit CompressionHook(DType dtype);
  std::shared_ptr<Work> RunHook(ProcessGroup& group, const GradBucket& bucket) override;
  std::string name() const override;

 private:
  DType dtype_;
};

// "none"/"allreduce" -> AllReduceHook, "fp16", "bf16"; an error lists the valid names.
absl::StatusOr<std::shared_ptr<CommHook>> MakeCommHook(const std::string& name);

}  // namespace ddp

#endif  // DDP_REDUCER_COMM_HOOK_H_
