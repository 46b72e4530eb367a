// Adam and AdamW with exactly torch.optim.Adam / torch.optim.AdamW's update (amsgrad=False,
// maximize=False), per parameter with its own step count t:
//   Adam:  g = grad + weight_decay * param          AdamW: param *= 1 - lr * weight_decay; g = grad
//   m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g^2
//   param -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
#ifndef DDP_NN_ADAM_H_
#define DDP_NN_ADAM_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "nn/optimizer.h"

namespace ddp {

struct AdamOptions {
  float lr = 1e-3f;           // learning rate
  float beta1 = 0.9f;         // decay of the first-moment average
  float beta2 = 0.999f;       // decay of the second-moment average
  float eps = 1e-8f;          // added to the denominator
  float weight_decay = 0.0f;  // Adam: L2 added to the gradient; AdamW: decoupled decay (torch's AdamW
                              // default is 1e-2: use AdamWDefaultOptions())
};

// AdamOptions with torch.optim.AdamW's defaults (weight_decay = 1e-2).
AdamOptions AdamWDefaultOptions();

// OK, or an error naming the invalid field (lr, eps or weight_decay negative; betas outside [0, 1)).
absl::Status ValidateAdamOptions(const AdamOptions& options);

// State per parameter after its first step: "<index>.step" (int64 scalar), "<index>.exp_avg",
// "<index>.exp_avg_sq".
class Adam : public Optimizer {
 public:
  // REQUIRES: ValidateAdamOptions(options).ok() (checked); params require grad.
  Adam(std::vector<Tensor> params, const AdamOptions& options) : Adam(std::move(params), options, false) {}

  void Step() override;
  OptimizerState StateDict() const override;
  absl::Status LoadStateDict(const OptimizerState& state) override;
  float lr() const override { return options_.lr; }
  void set_lr(float lr) override { options_.lr = lr; }
  const AdamOptions& options() const { return options_; }

 protected:
  Adam(std::vector<Tensor> params, const AdamOptions& options, bool decoupled_weight_decay);

 private:
  struct ParamState {
    int64_t step = 0;  // 0: no state yet
    Tensor exp_avg, exp_avg_sq;
  };
  AdamOptions options_;
  bool decoupled_;
  std::vector<ParamState> state_;
};

// Adam with decoupled weight decay (torch.optim.AdamW).
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, const AdamOptions& options = AdamWDefaultOptions())
      : Adam(std::move(params), options, true) {}
};

}  // namespace ddp

#endif  // DDP_NN_ADAM_H_
