// Stochastic gradient descent with momentum, dampening, weight decay and Nesterov momentum, with
// exactly torch.optim.SGD's update (maximize=False):
//   d = grad + weight_decay * param
//   if momentum != 0: buf = d on the parameter's first step, else momentum * buf + (1 - dampening) * d
//                     d = nesterov ? d + momentum * buf : buf
//   param -= lr * d
#ifndef DDP_NN_SGD_H_
#define DDP_NN_SGD_H_

#include <vector>

#include "absl/status/status.h"
#include "nn/optimizer.h"

namespace ddp {

struct SgdOptions {
  float lr = 0.01f;           // learning rate (torch requires one; 0.01 is the common choice)
  float momentum = 0.0f;      // 0 disables the momentum buffer
  float dampening = 0.0f;     // scales the new gradient in the momentum update by (1 - dampening)
  float weight_decay = 0.0f;  // L2 penalty added to the gradient
  bool nesterov = false;      // REQUIRES momentum > 0 and dampening == 0
};

// OK, or an error naming the invalid field (negative lr/momentum/weight_decay, nesterov without
// momentum or with dampening). For options that come from flags or files.
absl::Status ValidateSgdOptions(const SgdOptions& options);

// State per parameter: "<index>.momentum_buffer" (only with momentum, after the parameter's first step).
class Sgd : public Optimizer {
 public:
  // REQUIRES: ValidateSgdOptions(options).ok() (checked); params require grad.
  Sgd(std::vector<Tensor> params, const SgdOptions& options);

  void Step() override;
  OptimizerState StateDict() const override;
  absl::Status LoadStateDict(const OptimizerState& state) override;
  float lr() const override { return options_.lr; }
  void set_lr(float lr) override { options_.lr = lr; }
  const SgdOptions& options() const { return options_; }

 private:
  SgdOptions options_;
  std::vector<Tensor> momentum_buffers_;  // undefined until the parameter's first step
};

}  // namespace ddp

#endif  // DDP_NN_SGD_H_
