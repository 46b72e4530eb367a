// Communication hooks: how a bucket's gradients are reduced across ranks (PyTorch's
// register_comm_hook). The Reducer hands each full bucket to its hook (ReducerOptions::comm_hook, or
// DistributedDataParallel::RegisterCommHook); built-ins: plain all-reduce (the default), fp16 and bf16
// compression, and PowerSGD (reducer/powersgd_hook.h). A hook is a CommHook subclass: its object owns
// whatever state it keeps across iterations (error feedback, its own step counter).
//
// Note [Hook completion]
// RunHook returns a Work that completes only when `bucket.buffer` holds the reduced result, like the
// future PyTorch's hooks return. A hook with work to do after a collective (decompression, PowerSGD's
// second stage) chains it with ThenWork: each continuation runs on the thread that completes the
// collective before it (the backend's worker, through Work::AddCompletionCallback), not inside Wait(),
// so the host never blocks for it and the Reducer's wait sees the finished buffer. Where a backend's
// Work cannot notify completion (AddCompletionCallback returns false: NCCL's Works), the chain
// falls back to running the continuation in Wait()/WaitStream() on the waiting thread.
// A continuation that issues a collective runs on a worker thread, so its place in the group's issue
// order is a race with the training thread's next bucket: a hook that does this must order its own
// collectives identically on every rank (PowerSGD: Note [PowerSGD issue order] in powersgd_hook.cc).
#ifndef DDP_REDUCER_COMM_HOOK_H_
#define DDP_REDUCER_COMM_HOOK_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/process_group.h"
#include "tensor/tensor.h"

namespace ddp {

// One parameter's place in a bucket.
struct GradBucketParameter {
  size_t index = 0;    // the parameter's index in the Reducer (registration order); stable across rebuilds
  std::string name;    // its dotted name
  Shape shape;         // its shape
  int64_t offset = 0;  // first element in the bucket buffer
  int64_t numel = 0;   // elements
  Tensor view;         // its region of the buffer, shaped like the parameter (aliases `buffer`)
};

// What a hook sees of one bucket. The layout may change once, after the first iteration (Note [Bucket
// rebuild] in reducer.h): key per-parameter state by GradBucketParameter::index or name, not by offset.
struct GradBucket {
  int index = 0;                               // launch order within the iteration
  Tensor buffer;                               // flat, contiguous: the bucket's gradients, already divided
                                               // by the world size (so a sum over ranks is the average)
                                               // unless `undivided`
  std::vector<GradBucketParameter> parameters;  // in buffer order; views cover the buffer exactly
  bool is_last = false;                        // the iteration's last bucket (hooks count steps on it)
  // Out: bytes this rank hands to collectives for this bucket (the payloads, not the ring's traffic).
  // The hook sets it; left at -1 the Reducer counts buffer.nbytes().
  int64_t bytes_sent = -1;
  // Set only for AllReduceHook, on groups that fuse kAvg's division (Note [Averaging in the collective] in
  // reducer/reducer.h): `buffer` holds this rank's undivided gradients and the hook averages.
  bool undivided = false;
};

// Reduces buckets. RunHook is called on the thread running backward and must not block it on
// communication: it starts the reduction and returns a Work that completes when `bucket.buffer` holds
// the sum over ranks of every rank's buffer, i.e. the average gradient (Note [Hook completion]). The
// hook may read and overwrite `bucket.buffer` until then. Every rank must use the same hook with the same
// settings; name() is part of DDP's settings agreement, so it should name the settings too.
class CommHook {
 public:
  virtual ~CommHook() = default;
  virtual std::shared_ptr<Work> RunHook(ProcessGroup& group, GradBucket& bucket) = 0;
  // "allreduce", "fp16", "bf16", "powersgd(rank=1,...)", or a custom hook's name.
  virtual std::string name() const = 0;
  // Whether RunHook handles buckets of `dtype` (the Reducer's reduce dtype, ReducerOptions::reduce_dtype).
  // The default is float32 only: a hook that handles others says so by overriding this.
  virtual bool SupportsBucketDtype(DType dtype) const { return dtype == DType::kFloat32; }
};

// A step of a chain: runs after the previous Work completed OK and returns the next Work to wait for, or
// nullptr when the chain is done; an error fails the chain.
using HookContinuation = std::function<absl::StatusOr<std::shared_ptr<Work>>()>;

// Future-like chaining (Note [Hook completion]): a Work that completes when `first` completed, then
// continuations[0] ran and the Work it returned completed, then continuations[1] ..., or with the first
// error. StartTime() is `first`'s, EndTime() when the last step finished. REQUIRES: first != nullptr.
// Thread-safe; continuations run one at a time, in order.
std::shared_ptr<Work> ThenWork(std::string description, std::shared_ptr<Work> first,
                               std::vector<HookContinuation> continuations);

// The default: an in-place sum all-reduce of the bucket (an average when the bucket is `undivided`).
class AllReduceHook : public CommHook {
 public:
  std::shared_ptr<Work> RunHook(ProcessGroup& group, GradBucket& bucket) override;
  std::string name() const override { return "allreduce"; }
  bool SupportsBucketDtype(DType) const override { return true; }  // sums whatever dtype the bucket has
};

// Compresses the bucket to a 16-bit float type, all-reduces that (half the bytes on the wire), and
// decompresses into the bucket as the all-reduce completes (a ThenWork continuation). Error: one
// rounding of each rank's value to 16 bits plus rounding of the partial sums (float16: ~1e-3 relative;
// bfloat16: ~1e-2).
// Buckets must be float32: with a 16-bit reduce dtype the buckets are compressed already, and DDP
// refuses the combination by the hook's name rather than convert twice.
class CompressionHook : public CommHook {
 public:
  // REQUIRES: dtype is kFloat16 or kBFloat16.
  explicit CompressionHook(DType dtype);
  std::shared_ptr<Work> RunHook(ProcessGroup& group, GradBucket& bucket) override;
  std::string name() const override;

 private:
  DType dtype_;
};

// Settings of the PowerSGD hook (reducer/powersgd_hook.h; PyTorch's PowerSGDState).
struct PowerSgdOptions {
  int matrix_approximation_rank = 1;   // r: P is n x r, Q is m x r (capped at min(n, m))
  int start_iter = 10;                 // plain all-reduce for the first start_iter iterations; >= 2 because
                                       // the buckets are rebuilt after the first (PyTorch's default: 1000)
  double min_compression_rate = 2.0;   // compress an n x m matrix only if (n + m) * r * rate < n * m
  bool use_error_feedback = true;      // add last step's compression error to this step's gradient
  bool warm_start = true;              // reuse last step's Q (else a fresh random Q every step)
  uint64_t seed = 0;                   // of the random initial Q (the same on every rank)
};

// "none"/"allreduce" -> AllReduceHook, "fp16", "bf16", "powersgd" (with `powersgd`); an error lists the
// valid names, or names a bad PowerSGD setting.
absl::StatusOr<std::shared_ptr<CommHook>> MakeCommHook(const std::string& name,
                                                       const PowerSgdOptions& powersgd = {});

}  // namespace ddp

#endif  // DDP_REDUCER_COMM_HOOK_H_
