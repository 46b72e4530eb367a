// Optimizer: the interface of SGD (nn/sgd.h), Adam and AdamW (nn/adam.h), with torch.optim's update
// rules and per-parameter state saved as named tensors for checkpoints.
//
// An optimizer holds Tensor handles to the parameters it updates (shared with the module: it does not
// own them) and updates them in place, so DDP's gradient views and module references stay valid.
// Parameters whose grad() is undefined are skipped, as in PyTorch. Thread safety: none.
#ifndef DDP_NN_OPTIMIZER_H_
#define DDP_NN_OPTIMIZER_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "tensor/tensor.h"

namespace ddp {

// An optimizer's state: the number of Step() calls and per-parameter tensors named
// "<parameter index>.<field>" (torch's state_dict()["state"][index][field]), e.g. "0.momentum_buffer",
// "3.exp_avg", "3.exp_avg_sq", "3.step" (Adam's per-parameter step, an int64 scalar). Only parameters
// that already have state appear.
struct OptimizerState {
  int64_t step_count = 0;
  std::vector<std::pair<std::string, Tensor>> tensors;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Updates every parameter that has a gradient, in place. REQUIRES: parameters and gradients are
  // float32 on the CPU, parameters contiguous (checked).
  virtual void Step() = 0;

  // Zeroes existing gradients in place (torch 1.13's zero_grad(set_to_none=False)), or with
  // `set_to_none` drops them (PyTorch 2.x's default); see Module::ZeroGrad.
  void ZeroGrad(bool set_to_none = false) const;

  // A deep copy of the state (tensors do not alias the optimizer's).
  virtual OptimizerState StateDict() const = 0;
  // Replaces the state with `state` (deep copy). An error names the unknown key or the tensor whose
  // shape or dtype does not fit its parameter; on error the state is unchanged.
  virtual absl::Status LoadStateDict(const OptimizerState& state) = 0;

  const std::vector<Tensor>& params() const { return params_; }
  int64_t step_count() const { return step_count_; }
  // The learning rate (for schedulers).
  virtual float lr() const = 0;
  virtual void set_lr(float lr) = 0;

 protected:
  explicit Optimizer(std::vector<Tensor> params);

  // Checks the Step() preconditions for parameter `index` and returns its gradient as a contiguous
  // float32 tensor (the gradient itself when already contiguous).
  Tensor CheckedGrad(size_t index) const;

  // Helpers for LoadStateDict: the parameter index and field of "<index>.<field>", or an error.
  absl::Status ParseStateKey(const std::string& key, size_t* index, std::string* field) const;

  std::vector<Tensor> params_;
  int64_t step_count_ = 0;
};

}  // namespace ddp

#endif  // DDP_NN_OPTIMIZER_H_
