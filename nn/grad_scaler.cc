#include "nn/grad_scaler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/check.h"
#include "tensor/low_precision_round.h"
#include "tensor/ops.h"

namespace ddp {

absl::Status ValidateGradScalerOptions(const GradScalerOptions& options) {
  const auto bad = [](const char* field, double value, const char* want) {
    return absl::InvalidArgumentError(absl::StrCat("GradScaler ", field, " = ", value, ": must be ", want));
  };
  if (!(options.init_scale > 0) || !std::isfinite(options.init_scale)) {
    return bad("init_scale", options.init_scale, "a finite number > 0");
  }
  if (!(options.growth_factor > 1) || !std::isfinite(options.growth_factor)) {
    return bad("growth_factor", options.growth_factor, "a finite number > 1");
  }
  if (!(options.backoff_factor > 0 && options.backoff_factor < 1)) {
    return bad("backoff_factor", options.backoff_factor, "in (0, 1)");
  }
  if (options.growth_interval < 1) return bad("growth_interval", options.growth_interval, ">= 1");
  return absl::OkStatus();
}

GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_(options.init_scale) {
  const absl::Status valid = ValidateGradScalerOptions(options_);
  DDP_CHECK(valid.ok()) << valid.message();
}

Tensor GradScaler::Scale(const Tensor& loss) const {
  if (!options_.enabled) return loss;
  return MulScalar(loss, scale_);
}

namespace {

// A scalar on grad's device that is 0 when every element of grad is finite and NaN otherwise (inf * 0 and
// NaN * 0 are NaN; a finite value times 0 is +-0, and a sum of zeros cannot overflow).
Tensor NonFiniteProbe(const Tensor& grad) { return Sum(MulScalar(grad, 0.0f)); }

// Multiplies g[0, n) by inv_scale in place; true when every value was finite before the multiply (as torch
// checks). A float is inf or NaN exactly when its exponent bits are all ones, so the check is the largest
// exponent field seen: integer max and multiply in one pass, which the compiler vectorises (a loop over
// std::isfinite with a bool accumulator stays scalar, and took a fifth of an fp16 mlp step).
bool UnscaleAndCheckFinite(float* g, int64_t n, float inv_scale) {
  constexpr uint32_t kExponentBits = 0x7f800000u;
  uint32_t largest_exponent = 0;
  for (int64_t i = 0; i < n; ++i) {
    largest_exponent = std::max(largest_exponent, functors::FloatBits(g[i]) & kExponentBits);
    g[i] *= inv_scale;
  }
  return largest_exponent != kExponentBits;
}

}  // namespace

bool GradScaler::UnscaleGradients(const std::vector<Tensor>& params) const {
  if (!options_.enabled) return false;
  // As torch: the reciprocal in double, then float32 (a float32 division can be off by an ulp).
  const float inv_scale = static_cast<float>(1.0 / static_cast<double>(scale_));
  bool found_inf = false;
  // CUDA gradients: checked and multiplied on the device, the check read back once for all of them.
  Tensor device_probe;
  for (const Tensor& p : params) {
    const Tensor grad = p.grad();
    if (!grad.defined()) continue;
    if (grad.device().is_cuda()) {
      DDP_CHECK(grad.dtype() == DType::kFloat32)
          << "GradScaler: the gradient of '" << p.name() << "' must be a float32 tensor";
      const Tensor probe = NonFiniteProbe(grad);  // before the multiply, as torch checks
      device_probe = device_probe.defined() ? Add(device_probe, probe) : probe;
      MulScalarInPlace(grad, inv_scale);
      continue;
    }
    DDP_CHECK(grad.dtype() == DType::kFloat32 && grad.device().is_cpu() && grad.is_contiguous())
        << "GradScaler: the gradient of '" << p.name() << "' must be a contiguous float32 CPU tensor";
    found_inf |= !UnscaleAndCheckFinite(grad.data<float>(), grad.numel(), inv_scale);
  }
  if (device_probe.defined()) found_inf |= !std::isfinite(ToDevice(device_probe, Device::CPU()).ToVector<float>()[0]);
  return found_inf;
}

void GradScaler::Update(bool found_inf) {
  if (!options_.enabled) return;
  if (found_inf) {
    scale_ = static_cast<float>(static_cast<double>(scale_) * options_.backoff_factor);
    growth_tracker_ = 0;
    return;
  }
  const int64_t successful = growth_tracker_ + 1;
  if (successful == options_.growth_interval) {
    const float grown = static_cast<float>(static_cast<double>(scale_) * options_.growth_factor);
    if (std::isfinite(grown)) scale_ = grown;
    growth_tracker_ = 0;
  } else {
    growth_tracker_ = successful;
  }
}

std::string GradScaler::StateText() const {
  // %.9g round-trips a float32, %.17g a double.
  return absl::StrFormat(
      "{\"scale\":%.9g,\"growth_factor\":%.17g,\"backoff_factor\":%.17g,\"growth_interval\":%d,"
      "\"_growth_tracker\":%d}",
      scale_, options_.growth_factor, options_.backoff_factor, options_.growth_interval, growth_tracker_);
}

absl::Status GradScaler::RestoreState(absl::string_view text) {
  DDP_CHECK(options_.enabled) << "GradScaler::RestoreState on a disabled scaler";
  const nlohmann::json json = nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) {
    return absl::DataLossError(absl::StrCat("GradScaler state is not a JSON object: \"", text, "\""));
  }
  const auto number = [&](const char* field, double* out) -> absl::Status {
    const auto it = json.find(field);
    if (it == json.end() || !it->is_number()) {
      return absl::DataLossError(absl::StrCat("GradScaler state: \"", field, "\" is missing or not a number"));
    }
    *out = it->get<double>();
    return absl::OkStatus();
  };
  double scale = 0, growth = 0, backoff = 0, interval = 0, tracker = 0;
  DDP_RETURN_IF_ERROR(number("scale", &scale));
  DDP_RETURN_IF_ERROR(number("growth_factor", &growth));
  DDP_RETURN_IF_ERROR(number("backoff_factor", &backoff));
  DDP_RETURN_IF_ERROR(number("growth_interval", &interval));
  DDP_RETURN_IF_ERROR(number("_growth_tracker", &tracker));
  GradScalerOptions restored = options_;
  restored.init_scale = static_cast<float>(scale);
  restored.growth_factor = growth;
  restored.backoff_factor = backoff;
  restored.growth_interval = static_cast<int64_t>(interval);
  if (const absl::Status valid = ValidateGradScalerOptions(restored); !valid.ok()) {
    return absl::DataLossError(absl::StrCat("GradScaler state: ", valid.message()));
  }
  if (!(tracker >= 0 && tracker < interval) || tracker != std::floor(tracker) || interval != std::floor(interval)) {
    return absl::DataLossError(absl::StrCat("GradScaler state: _growth_tracker ", tracker,
                                            " must be an integer in [0, growth_interval ", interval, ")"));
  }
  options_ = restored;
  scale_ = restored.init_scale;
  growth_tracker_ = static_cast<int64_t>(tracker);
  return absl::OkStatus();
}

}  // namespace ddp
