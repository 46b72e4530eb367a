#include "reducer/powersgd_hook.h"

#include <algorithm>
#include <cmath>
#include <atomic>
#include <deque>
#include <functional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/async_work.h"
#include "tensor/autograd.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "tensor/random.h"

namespace ddp {

// Note [PowerSGD issue order]
// A bucket needs two all-reduces, and the second (Q) can only be issued once the first (P) completed,
// from its completion callback on the group's worker thread. Meanwhile the training thread launches the
// next bucket. If each issued freely, rank 0 might queue P1 before Q0 and rank 1 Q0 before P1: the ranks'
// collectives would stop matching. So the hook's collectives go out in one fixed order on every rank,
// P0 Q0 P1 Q1 ...: a bucket's first all-reduce waits (a "turn", an AsyncWork gate) until the previous
// bucket issued its last one. The compute of P (M Q) is done at launch on the training thread; only the
// issue waits. Collectives are executed one at a time per group anyway, so the wire stays busy.
// Collectives that other code issues on the same group during backward from the training thread
// (SyncBatchNorm) could still interleave differently: do not combine them with PowerSGD. Nor with
// DDP_DEBUG=detail: ProcessGroupDebug's collectives block their caller on a fingerprint exchange through
// the inner group, which from that group's own worker thread cannot run; the bucket then fails with the
// group's timeout error (bounded, not a hang).
class PowerSgdIssueOrder {
 public:
  // Runs `issue` now if no bucket holds the turn, else after the buckets before it released it.
  void Take(std::function<void()> issue) {
    {
      absl::MutexLock lock(&mu_);
      if (busy_) {
        waiting_.push_back(std::move(issue));
        return;
      }
      busy_ = true;
    }
    issue();
  }
  // The holder issued its last collective (or failed): the next waiting bucket issues.
  void Release() {
    std::function<void()> next;
    {
      absl::MutexLock lock(&mu_);
      if (waiting_.empty()) {
        busy_ = false;
        return;
      }
      next = std::move(waiting_.front());
      waiting_.pop_front();
    }
    next();
  }

 private:
  absl::Mutex mu_;
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<std::function<void()>> waiting_ ABSL_GUARDED_BY(mu_);
};

namespace {

using Continuation = HookContinuation;

// One compressed parameter of the bucket being reduced.
struct Matrix {
  std::shared_ptr<PowerSgdHook::ParameterState> state;
  Tensor view;   // its region of the bucket, shaped like the parameter
  Tensor input;  // n x m view of `view`: the local gradient plus error feedback until the result lands
  int64_t n = 0, m = 0, r = 0;
  int64_t p_offset = 0, q_offset = 0;  // in the stage buffers
  Tensor p;                            // orthogonalized P after the first all-reduce
};

// What the continuations of one bucket share.
struct BucketPlan {
  std::vector<Matrix> matrices;
  std::vector<GradBucketParameter> plain;  // all-reduced uncompressed, at the front of stage1
  Tensor stage1;                           // [plain values..., P_1..P_k]
  Tensor stage2;                           // [Q_1..Q_k]
  int64_t q_total = 0;
  bool error_feedback = true;
  bool warm_start = true;
  int world_size = 1;
};

Tensor Slice(const Tensor& flat, int64_t offset, int64_t numel, const Shape& shape) {
  return Reshape(Narrow(flat, 0, offset, numel), shape);
}

// After P's all-reduce: plain values into the bucket, P orthogonalized, local Q = M^T P, packed.
void ComputeLocalQ(BucketPlan& plan) {
  NoGradGuard no_grad;
  int64_t offset = 0;
  for (const GradBucketParameter& param : plan.plain) {
    CopyInPlace(param.view, Slice(plan.stage1, offset, param.numel, param.shape));
    offset += param.numel;
  }
  std::vector<Tensor> qs;
  for (Matrix& matrix : plan.matrices) {
    matrix.p = OrthogonalizeColumns(Slice(plan.stage1, matrix.p_offset, matrix.n * matrix.r, {matrix.n, matrix.r}));
    // Q = M^T P computed as (P^T M)^T: transposing the small P and the r x m product, not the n x m M
    // (a strided copy of M costs more than all the matmuls together).
    const Tensor pt_m = Matmul(Contiguous(Transpose(matrix.p, 0, 1)), matrix.input);
    qs.push_back(Reshape(Contiguous(Transpose(pt_m, 0, 1)), {matrix.m * matrix.r}));
  }
  if (!qs.empty()) plan.stage2 = Cat(qs, 0);
}

// After Q's all-reduce: M' = P Q^T into the bucket, the error kept, Q kept for the warm start.
// Note [PowerSGD error in scaled buckets]: the bucket holds local gradients already divided by the world
// size W, so the ranks' inputs sum (not average) to the gradient. Each rank keeps e = input - M' / W:
// the errors then sum to (sum of inputs) - M', exactly the part of the gradient the approximation
// dropped, which the next step's all-reduce adds back (PyTorch keeps input - M' on unscaled inputs,
// whose average is the same quantity).
void ApplyApproximation(BucketPlan& plan) {
  NoGradGuard no_grad;
  for (Matrix& matrix : plan.matrices) {
    const Tensor q = Slice(plan.stage2, matrix.q_offset, matrix.m * matrix.r, {matrix.m, matrix.r});
    const Tensor approximation = Matmul(matrix.p, Contiguous(Transpose(q, 0, 1)));
    if (plan.error_feedback) {
      CopyInPlace(matrix.state->error, Sub(matrix.input, MulScalar(approximation, 1.0f / plan.world_size)));
    }
    CopyInPlace(matrix.view, Reshape(approximation, matrix.view.shape()));
    if (plan.warm_start) CopyInPlace(matrix.state->q, q);
  }
}

}  // namespace

bool PowerSgdCompresses(int64_t n, int64_t m, int rank, double min_compression_rate) {
  const int64_t r = std::min<int64_t>({n, m, static_cast<int64_t>(rank)});
  return static_cast<double>((n + m) * r) * min_compression_rate < static_cast<double>(n * m);
}

Tensor OrthogonalizeColumns(const Tensor& p) {
  NoGradGuard no_grad;
  DDP_CHECK(p.dim() == 2) << "OrthogonalizeColumns needs a matrix";
  // Rows of the transpose are the columns: contiguous views to update in place.
  Tensor rows = Contiguous(Transpose(p, 0, 1));
  const int64_t r = rows.shape()[0];
  for (int64_t j = 0; j < r; ++j) {
    const Tensor row = Narrow(rows, 0, j, 1);
    Tensor v = Clone(row);
    const float norm_before = std::sqrt(Sum(Mul(v, v)).ToVector<float>()[0]);
    for (int64_t k = 0; k < j; ++k) {
      const Tensor earlier = Narrow(rows, 0, k, 1);
      v = Sub(v, Mul(earlier, Sum(Mul(v, earlier))));
    }
    const float norm = std::sqrt(Sum(Mul(v, v)).ToVector<float>()[0]);
    // A column (numerically) in the span of the earlier ones is rounding noise: normalizing it would
    // add a spurious direction to P P^T (gradients are often rank-deficient: a softmax layer's weight
    // gradient has rows summing to zero). It becomes zero instead.
    if (!(norm > 1e-4f * norm_before) || norm == 0.0f) {
      FillInPlace(row, 0.0f);
    } else {
      CopyInPlace(row, MulScalar(v, 1.0f / norm));
    }
  }
  return Contiguous(Transpose(rows, 0, 1));
}

absl::StatusOr<std::shared_ptr<PowerSgdHook>> PowerSgdHook::Create(const PowerSgdOptions& options) {
  if (options.matrix_approximation_rank < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("PowerSGD: matrix_approximation_rank must be >= 1, got ", options.matrix_approximation_rank));
  }
  if (options.start_iter < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PowerSGD: start_iter must be >= 2 (the buckets are rebuilt after the first iteration), got ",
        options.start_iter));
  }
  if (options.min_compression_rate < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("PowerSGD: min_compression_rate must be >= 0, got ", options.min_compression_rate));
  }
  return std::shared_ptr<PowerSgdHook>(new PowerSgdHook(options));
}

PowerSgdHook::PowerSgdHook(const PowerSgdOptions& options)
    : options_(options), issue_order_(std::make_shared<PowerSgdIssueOrder>()) {}

std::string PowerSgdHook::name() const {
  auto flag = [](bool b) { return b ? "true" : "false"; };
  return absl::StrCat("powersgd(rank=", options_.matrix_approximation_rank, ",start_iter=", options_.start_iter,
                      ",min_compression_rate=", options_.min_compression_rate,
                      ",error_feedback=", flag(options_.use_error_feedback),
                      ",warm_start=", flag(options_.warm_start), ")");
}

int64_t PowerSgdHook::iteration() const {
  absl::MutexLock lock(&mu_);
  return iteration_;
}

std::shared_ptr<Work> PowerSgdHook::RunHook(ProcessGroup& group, GradBucket& bucket) {
  int64_t iteration;
  {
    absl::MutexLock lock(&mu_);
    iteration = iteration_;
    if (bucket.is_last) ++iteration_;
  }
  if (iteration < options_.start_iter) {
    // Plain all-reduce. No chain of an earlier iteration is in flight (the Reducer waited for it).
    bucket.bytes_sent = static_cast<int64_t>(bucket.buffer.nbytes());
    return group.AllReduce(bucket.buffer, ReduceOp::kSum);
  }
  return RunCompressed(group, bucket, iteration);
}

std::shared_ptr<PowerSgdHook::ParameterState> PowerSgdHook::StateFor(const GradBucketParameter& param, int64_t n,
                                                                      int64_t m, int64_t r) {
  absl::MutexLock lock(&mu_);
  std::shared_ptr<ParameterState>& state = states_[param.index];
  if (state == nullptr) {
    state = std::make_shared<ParameterState>();
    // The same seed on every rank gives every rank the same Q.
    Generator generator(options_.seed * 1000003 + param.index);
    state->q = Normal({m, r}, 0.0f, 1.0f, generator, param.view.device());
    if (options_.use_error_feedback) {
      state->error = Tensor::Empty({n, m}, DType::kFloat32, param.view.device());
      FillInPlace(state->error, 0.0f);
    }
  }
  return state;
}

std::shared_ptr<Work> PowerSgdHook::RunCompressed(ProcessGroup& group, GradBucket& bucket, int64_t iteration) {
  NoGradGuard no_grad;
  auto plan = std::make_shared<BucketPlan>();
  plan->error_feedback = options_.use_error_feedback;
  plan->warm_start = options_.warm_start;
  plan->world_size = group.size();
  std::vector<Tensor> stage1_parts;
  std::vector<Tensor> ps;
  int64_t plain_total = 0;
  for (const GradBucketParameter& param : bucket.parameters) {
    const int64_t n = param.shape.empty() ? 1 : param.shape[0];
    const int64_t m = n == 0 ? 0 : param.numel / n;
    if (param.shape.size() < 2 || !PowerSgdCompresses(n, m, options_.matrix_approximation_rank,
                                                      options_.min_compression_rate)) {
      plan->plain.push_back(param);
      stage1_parts.push_back(Reshape(param.view, {param.numel}));
      plain_total += param.numel;
      continue;
    }
    Matrix matrix;
    matrix.n = n;
    matrix.m = m;
    matrix.r = std::min<int64_t>({n, m, static_cast<int64_t>(options_.matrix_approximation_rank)});
    matrix.state = StateFor(param, n, m, matrix.r);
    matrix.view = param.view;
    matrix.input = Reshape(param.view, {n, m});
    if (options_.use_error_feedback) AddInPlace(matrix.input, matrix.state->error);
    if (!options_.warm_start) {
      Generator generator((options_.seed * 1000003 + param.index) * 7919 + static_cast<uint64_t>(iteration));
      matrix.state->q = Normal({m, matrix.r}, 0.0f, 1.0f, generator, param.view.device());
    }
    ps.push_back(Reshape(Matmul(matrix.input, matrix.state->q), {n * matrix.r}));
    plan->matrices.push_back(std::move(matrix));
  }
  int64_t p_offset = plain_total;
  for (Matrix& matrix : plan->matrices) {
    matrix.p_offset = p_offset;
    p_offset += matrix.n * matrix.r;
    matrix.q_offset = plan->q_total;
    plan->q_total += matrix.m * matrix.r;
  }
  for (Tensor& p : ps) stage1_parts.push_back(std::move(p));
  plan->stage1 = Cat(stage1_parts, 0);
  bucket.bytes_sent = static_cast<int64_t>(plan->stage1.nbytes()) + plan->q_total * 4;

  // Note [PowerSGD issue order]: the first all-reduce waits for this bucket's turn (`turn`); the turn
  // passes on once the second is issued, or when the chain ends (an error, or no matrices).
  auto turn = std::make_shared<AsyncWork>(absl::StrCat("PowerSGD bucket ", bucket.index, " issue turn"));
  auto released = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<PowerSgdIssueOrder> order = issue_order_;
  auto release = [order, released] {
    if (!released->exchange(true)) order->Release();
  };
  ProcessGroup* pg = &group;
  std::vector<Continuation> steps;
  steps.push_back([pg, plan]() -> absl::StatusOr<std::shared_ptr<Work>> {
    return pg->AllReduce(plan->stage1, ReduceOp::kSum);
  });
  steps.push_back([pg, plan, release]() -> absl::StatusOr<std::shared_ptr<Work>> {
    ComputeLocalQ(*plan);
    if (plan->matrices.empty()) {
      release();
      return std::shared_ptr<Work>();
    }
    std::shared_ptr<Work> work = pg->AllReduce(plan->stage2, ReduceOp::kSum);
    release();
    return work;
  });
  steps.push_back([plan]() -> absl::StatusOr<std::shared_ptr<Work>> {
    ApplyApproximation(*plan);
    return std::shared_ptr<Work>();
  });
  std::shared_ptr<Work> chain = ThenWork(absl::StrCat("PowerSGD bucket ", bucket.index), turn, std::move(steps));
  chain->AddCompletionCallback([release](const absl::Status&) { release(); });
  order->Take([turn] { turn->Complete(absl::OkStatus()); });
  return chain;
}

}  // namespace ddp
