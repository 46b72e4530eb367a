// GradScaler: dynamic loss scaling for float16 mixed precision, with torch.amp.GradScaler's semantics,
// step for step (the transitions are checked against a fixture that torch writes:
// tools/gen_grad_scaler_fixture.py, //nn:grad_scaler_test).
//
//   GradScaler scaler;                                     // scale 2^16, x2 every 2000 clean steps
//   scaler.Scale(loss).Backward();                         // gradients are scale times too large
//   bool found_inf = scaler.UnscaleGradients(params);      // divide them back; inf/NaN anywhere?
//   // under DDP: agree found_inf across ranks (train/train all-reduces it)
//   if (!found_inf) optimizer.Step();                      // a step with overflowed gradients is skipped
//   scaler.Update(found_inf);                              // back off, or grow after a clean interval
//
// Note [Loss scaling]: float16 has 5 exponent bits, so small gradients underflow to zero. Multiplying the
// loss by a large scale S moves every gradient up by S (the chain rule is linear); the optimizer sees them
// divided by S again. If S was too large some gradient overflows to inf (or becomes NaN): that step is
// skipped and S shrinks by backoff_factor; after growth_interval consecutive clean steps S grows by
// growth_factor (unless that would make S infinite). As in torch, the inverse scale is computed in double
// and rounded to float32, gradients are multiplied by it in float32, and a gradient is non-finite if any
// element is inf or NaN before the multiplication. bfloat16 has float32's exponent range and needs none
// of this (train/train turns the scaler on with --precision=fp16 only).
//
// Thread safety: not thread-safe; the training thread owns it.
#ifndef DDP_NN_GRAD_SCALER_H_
#define DDP_NN_GRAD_SCALER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "tensor/tensor.h"

namespace ddp {

// torch.amp.GradScaler's constructor arguments, with its defaults.
struct GradScalerOptions {
  float init_scale = 65536.0f;     // 2^16: the first scale
  double growth_factor = 2.0;      // scale *= this after growth_interval consecutive clean steps (> 1)
  double backoff_factor = 0.5;     // scale *= this after a step with non-finite gradients (in (0, 1))
  int64_t growth_interval = 2000;  // clean steps between growths (>= 1)
  bool enabled = true;             // false: Scale and UnscaleGradients change nothing, Update does nothing
};

// OK, or kInvalidArgument naming the first bad field and its value.
absl::Status ValidateGradScalerOptions(const GradScalerOptions& options);

class GradScaler {
 public:
  // REQUIRES: ValidateGradScalerOptions(options).ok() (checked).
  explicit GradScaler(GradScalerOptions options = {});

  bool enabled() const { return options_.enabled; }
  // The current scale (torch's get_scale(): 1 when disabled).
  float scale() const { return options_.enabled ? scale_ : 1.0f; }
  // Consecutive clean steps since the last growth or backoff (torch's _growth_tracker).
  int64_t growth_tracker() const { return growth_tracker_; }
  const GradScalerOptions& options() const { return options_; }

  // loss * scale(), differentiable (loss itself when disabled).
  Tensor Scale(const Tensor& loss) const;
  // Multiplies every defined .grad of `params` in place by float32(1 / (double)scale()) and returns
  // whether any element of any of them was inf or NaN (torch's unscale_; the check is this rank's own:
  // under DDP the caller agrees it across ranks). Disabled: returns false and changes nothing. CUDA
  // gradients are checked and multiplied on their device (the same float32 products), and the check is
  // read back to the host once per call. REQUIRES: float32 gradients (contiguous ones on the CPU).
  bool UnscaleGradients(const std::vector<Tensor>& params) const;
  // The transition after a step (torch's update() / _amp_update_scale_): found_inf -> scale *=
  // backoff_factor and tracker = 0; else tracker + 1, and when that reaches growth_interval, scale *=
  // growth_factor (kept only if finite) and tracker = 0. The products are formed in double and rounded to
  // float32. Disabled: nothing.
  void Update(bool found_inf);

  // The state as torch's state_dict() names it, as JSON: {"scale":65536,"growth_factor":2,
  // "backoff_factor":0.5,"growth_interval":2000,"_growth_tracker":0} (exact round trip). For checkpoints
  // (extra state kGradScalerStateName).
  std::string StateText() const;
  // Loads StateText()'s output (torch's load_state_dict: the factors and the interval are the saved ones
  // too). Errors (kDataLoss) name a missing or bad field; the scaler is unchanged then. REQUIRES: enabled.
  absl::Status RestoreState(absl::string_view text);

 private:
  GradScalerOptions options_;
  float scale_;
  int64_t growth_tracker_ = 0;
};

// The name under which checkpoints keep GradScaler::StateText() (Checkpoint::extra_state).
inline constexpr char kGradScalerStateName[] = "grad_scaler";

}  // namespace ddp

#endif  // DDP_NN_GRAD_SCALER_H_
