#include "reducer/comm_hook.h"

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

// Waits for the all-reduce of the compressed copy, then writes it back into the bucket (once).
class DecompressingWork : public Work {
 public:
  DecompressingWork(std::shared_ptr<Work> inner, Tensor compressed, Tensor bucket)
      : inner_(std::move(inner)), compressed_(std::move(compressed)), bucket_(std::move(bucket)) {}

  bool IsCompleted() override { return inner_->IsCompleted(); }
  absl::Status Wait(absl::Duration timeout) override {
    absl::Status status = inner_->Wait(timeout);
    if (!status.ok()) return status;
    absl::MutexLock lock(&mu_);
    if (!decompressed_) {
      CopyInPlace(bucket_, compressed_);
      decompressed_ = true;
    }
    return absl::OkStatus();
  }
  double ExecutionSeconds() const override { return inner_->ExecutionSeconds(); }
  absl::Time StartTime() const override { return inner_->StartTime(); }
  absl::Time EndTime() const override { return inner_->EndTime(); }

 private:
  std::shared_ptr<Work> inner_;
  Tensor compressed_;
  Tensor bucket_;
  absl::Mutex mu_;
  bool decompressed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

std::shared_ptr<Work> AllReduceHook::RunHook(ProcessGroup& group, const GradBucket& bucket) {
  return group.AllReduce(bucket.buffer, ReduceOp::kSum);
}

CompressionHook::CompressionHook(DType dtype) : dtype_(dtype) {
  DDP_CHECK(dtype == DType::kFloat16 || dtype == DType::kBFloat16) << "compression hook needs float16 or bfloat16";
}

std::string CompressionHook::name() const { return dtype_ == DType::kFloat16 ? "fp16" : "bf16"; }

std::shared_ptr<Work> CompressionHook::RunHook(ProcessGroup& group, const GradBucket& bucket) {
  Tensor compressed = ToDType(bucket.buffer, dtype_);
  std::shared_ptr<Work> inner = group.AllReduce(compressed, ReduceOp::kSum);
  return std::make_shared<DecompressingWork>(std::move(inner), compressed, bucket.buffer);
}

absl::StatusOr<std::shared_ptr<CommHook>> MakeCommHook(const std::string& name) {
  if (name == "none" || name == "allreduce") return std::shared_ptr<CommHook>(new AllReduceHook());
  if (name == "fp16") return std::shared_ptr<CommHook>(new CompressionHook(DType::kFloat16));
  if (name == "bf16") return std::shared_ptr<CommHook>(new CompressionHook(DType::kBFloat16));
  return absl::InvalidArgumentError(absl::StrCat("unknown comm hook \"", name, "\": expected none, fp16 or bf16"));
}

}  // namespace ddp
