// PowerSGD gradient compression as a communication hook (Vogels et al. 2019, "PowerSGD: Practical
// Low-Rank Gradient Compression for Distributed Optimization"; PyTorch's powerSGD_hook).
//
// For each matrix gradient M (a parameter of two or more dimensions, viewed as n x m with n its first
// dimension) with error feedback e and the hook's saved Q (m x r):
//   M += e;  P = M Q;  all-reduce P;  orthogonalize P;  Q = M^T P;  all-reduce Q;  M' = P Q^T;  e = M - M'
// and the bucket receives M'. Vectors (biases) and matrices that would not compress, i.e. with
// (n + m) r * min_compression_rate >= n m, are packed with the P's into the first all-reduce and reduced
// exactly. With r >= min(n, m) the approximation is exact. Q is kept for the next step (warm start).
// The first start_iter iterations are plain all-reduces of the bucket (start_iter >= 2: the buckets are
// rebuilt after the first iteration, Note [Bucket rebuild]).
//
// Per-parameter state (Q, error) is keyed by GradBucketParameter::index, so the bucket rebuild does not
// disturb it. The hook counts iterations itself (one per bucket with is_last). Use one hook per DDP
// module; it is not meant to be shared between Reducers.
#ifndef DDP_REDUCER_POWERSGD_HOOK_H_
#define DDP_REDUCER_POWERSGD_HOOK_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "reducer/comm_hook.h"

namespace ddp {

class PowerSgdIssueOrder;  // powersgd_hook.cc: Note [PowerSGD issue order]

// The PowerSGD hook. RunHook is called from the Reducer's training thread; its continuations run on the
// process group's worker (Note [Hook completion] in comm_hook.h). Thread-safe for that use.
class PowerSgdHook : public CommHook {
 public:
  // Errors (kInvalidArgument) name a bad setting: matrix_approximation_rank < 1, start_iter < 2, or a
  // negative min_compression_rate.
  static absl::StatusOr<std::shared_ptr<PowerSgdHook>> Create(const PowerSgdOptions& options);

  std::shared_ptr<Work> RunHook(ProcessGroup& group, GradBucket& bucket) override;
  // "powersgd(rank=R,start_iter=N,min_compression_rate=X,error_feedback=B,warm_start=B)".
  std::string name() const override;

  // Iterations seen so far (buckets with is_last).
  int64_t iteration() const;
  const PowerSgdOptions& options() const { return options_; }

  // Per compressed parameter: the warm-start Q (m x r) and the error feedback (n x m, when enabled).
  struct ParameterState {
    Tensor q;
    Tensor error;
  };

 private:
  explicit PowerSgdHook(const PowerSgdOptions& options);
  std::shared_ptr<Work> RunCompressed(ProcessGroup& group, GradBucket& bucket, int64_t iteration);
  std::shared_ptr<ParameterState> StateFor(const GradBucketParameter& param, int64_t n, int64_t m, int64_t r);

  const PowerSgdOptions options_;
  std::shared_ptr<PowerSgdIssueOrder> issue_order_;
  mutable absl::Mutex mu_;
  int64_t iteration_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<size_t, std::shared_ptr<ParameterState>> states_ ABSL_GUARDED_BY(mu_);
};

// Whether PowerSGD compresses an n x m matrix at rank r (capped at min(n, m)): (n + m) r * rate < n m.
bool PowerSgdCompresses(int64_t n, int64_t m, int rank, double min_compression_rate);

// Orthonormalizes the columns of `p` (n x r, float32) by Gram-Schmidt into a new tensor; a column that is
// (numerically) a combination of earlier ones comes out near zero rather than NaN.
Tensor OrthogonalizeColumns(const Tensor& p);

}  // namespace ddp

#endif  // DDP_REDUCER_POWERSGD_HOOK_H_
