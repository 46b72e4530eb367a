#include "reducer/comm_hook.h"

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "comm/async_work.h"
#include "reducer/powersgd_hook.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

// The Work of ThenWork. Each step registers a completion callback on its Work; the callback runs the
// next continuation and registers on the Work it returns. A Work without callbacks puts the chain in
// "lazy" mode: Wait drives it (Note [Hook completion]).
class ChainWork : public AsyncWork, public std::enable_shared_from_this<ChainWork> {
 public:
  ChainWork(std::string description, std::shared_ptr<Work> first, std::vector<HookContinuation> continuations)
      : AsyncWork(std::move(description)), first_(std::move(first)), continuations_(std::move(continuations)) {}

  void Start() { Follow(first_); }

  absl::Status Wait(absl::Duration timeout) override {
    const absl::Time deadline = absl::Now() + timeout;
    while (true) {
      std::shared_ptr<Work> step;
      {
        absl::MutexLock lock(&chain_mu_);
        if (lazy_step_ == nullptr) break;
        step.swap(lazy_step_);  // this thread drives it; another waiter waits for completion below
      }
      const absl::Status status = step->Wait(deadline - absl::Now());
      if (absl::IsDeadlineExceeded(status) && !step->IsCompleted()) {
        absl::MutexLock lock(&chain_mu_);
        lazy_step_ = step;
        return status;
      }
      StepDone(status);
    }
    return AsyncWork::Wait(std::max(deadline - absl::Now(), absl::ZeroDuration()));
  }
  absl::Time StartTime() const override {
    const absl::Time first = first_->StartTime();
    return first != absl::InfinitePast() ? first : AsyncWork::StartTime();
  }

 private:
  // Waits for `step` (or completes the chain when it is null).
  void Follow(std::shared_ptr<Work> step) {
    if (step == nullptr) {
      Complete(absl::OkStatus());
      return;
    }
    std::shared_ptr<ChainWork> self = shared_from_this();  // kept alive by the step until it completes
    if (step->AddCompletionCallback([self](const absl::Status& status) { self->StepDone(status); })) return;
    absl::MutexLock lock(&chain_mu_);
    lazy_step_ = std::move(step);
  }

  void StepDone(const absl::Status& status) {
    if (!status.ok()) {
      Complete(status);
      return;
    }
    if (next_ == continuations_.size()) {
      Complete(absl::OkStatus());
      return;
    }
    absl::StatusOr<std::shared_ptr<Work>> next = continuations_[next_++]();
    if (!next.ok()) {
      Complete(absl::Status(next.status().code(), absl::StrCat(description(), ": ", next.status().message())));
      return;
    }
    Follow(*std::move(next));
  }

  const std::shared_ptr<Work> first_;
  std::vector<HookContinuation> continuations_;
  size_t next_ = 0;  // steps run strictly one after another, so no lock is needed
  absl::Mutex chain_mu_;
  std::shared_ptr<Work> lazy_step_ ABSL_GUARDED_BY(chain_mu_);  // a step only Wait can observe
};

}  // namespace

std::shared_ptr<Work> ThenWork(std::string description, std::shared_ptr<Work> first,
                               std::vector<HookContinuation> continuations) {
  DDP_CHECK(first != nullptr) << "ThenWork needs a first Work";
  auto chain = std::make_shared<ChainWork>(std::move(description), std::move(first), std::move(continuations));
  chain->MarkStarted();
  chain->Start();
  return chain;
}

std::shared_ptr<Work> AllReduceHook::RunHook(ProcessGroup& group, GradBucket& bucket) {
  bucket.bytes_sent = static_cast<int64_t>(bucket.buffer.nbytes());
  return group.AllReduce(bucket.buffer, bucket.undivided ? ReduceOp::kAvg : ReduceOp::kSum);
}

CompressionHook::CompressionHook(DType dtype) : dtype_(dtype) {
  DDP_CHECK(dtype == DType::kFloat16 || dtype == DType::kBFloat16) << "compression hook needs float16 or bfloat16";
}

std::string CompressionHook::name() const { return dtype_ == DType::kFloat16 ? "fp16" : "bf16"; }

std::shared_ptr<Work> CompressionHook::RunHook(ProcessGroup& group, GradBucket& bucket) {
  Tensor compressed = ToDType(bucket.buffer, dtype_);
  bucket.bytes_sent = static_cast<int64_t>(compressed.nbytes());
  Tensor buffer = bucket.buffer;
  return ThenWork(absl::StrCat(name(), " bucket ", bucket.index), group.AllReduce(compressed, ReduceOp::kSum),
                  {[compressed, buffer]() -> absl::StatusOr<std::shared_ptr<Work>> {
                    CopyInPlace(buffer, compressed);  // decompress as the all-reduce completes
                    return std::shared_ptr<Work>();
                  }});
}

absl::StatusOr<std::shared_ptr<CommHook>> MakeCommHook(const std::string& name, const PowerSgdOptions& powersgd) {
  if (name == "none" || name == "allreduce") return std::shared_ptr<CommHook>(new AllReduceHook());
  if (name == "fp16") return std::shared_ptr<CommHook>(new CompressionHook(DType::kFloat16));
  if (name == "bf16") return std::shared_ptr<CommHook>(new CompressionHook(DType::kBFloat16));
  if (name == "powersgd") {
    DDP_ASSIGN_OR_RETURN(std::shared_ptr<PowerSgdHook> hook, PowerSgdHook::Create(powersgd));
    return std::shared_ptr<CommHook>(std::move(hook));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown comm hook \"", name, "\": expected none, fp16, bf16 or powersgd"));
}

}  // namespace ddp
