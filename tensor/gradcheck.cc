#include "tensor/gradcheck.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "tensor/autograd.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

double WeightedSum(const Tensor& out, const Tensor& weights) {
  std::vector<float> o = out.ToVector<float>(), w = weights.ToVector<float>();
  double total = 0.0;
  for (size_t i = 0; i < o.size(); ++i) total += static_cast<double>(o[i]) * w[i];
  return total;
}

}  // namespace

std::string GradCheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                      const std::vector<Tensor>& inputs, const GradCheckOptions& options) {
  Tensor probe;
  {
    NoGradGuard no_grad;
    probe = fn(inputs);
  }
  Generator generator(1234);
  Tensor weights = Uniform(probe.shape(), -1.0f, 1.0f, generator);
  for (const Tensor& input : inputs) if (input.requires_grad()) input.set_grad(Tensor());
  Tensor out = fn(inputs);
  Tensor loss = Sum(Mul(out, weights));
  loss.Backward();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& input = inputs[i];
    if (!input.requires_grad()) continue;
    if (!input.grad().defined()) return "input " + std::to_string(i) + " got no gradient";
    std::vector<float> analytic = input.grad().ToVector<float>();
    float* data = input.data<float>();  // inputs are contiguous CPU leaves
    const int64_t n = input.numel();
    const int64_t step = std::max<int64_t>(1, n / options.max_elements_per_input);
    for (int64_t e = 0; e < n; e += step) {
      const float original = data[e];
      NoGradGuard no_grad;
      data[e] = original + options.epsilon;
      const double plus = WeightedSum(fn(inputs), weights);
      data[e] = original - options.epsilon;
      const double minus = WeightedSum(fn(inputs), weights);
      data[e] = original;
      const double numeric = (plus - minus) / (2.0 * options.epsilon);
      const double error = std::abs(analytic[e] - numeric) / std::max(std::abs(numeric), 1.0);
      if (error > options.relative_tolerance) {
        std::ostringstream message;
        message << "input " << i << " element " << e << ": analytic " << analytic[e] << " numeric "
                << numeric << " (relative error " << error << ")";
        return message.str();
      }
    }
  }
  return "";
}

Tensor UniformLeaf(const Shape& shape, uint64_t seed, float low, float high) {
  Generator g(seed);
  Tensor t = Uniform(shape, low, high, g);
  t.set_requires_grad(true);
  return t;
}

}  // namespace ddp
