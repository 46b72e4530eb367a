// Element-wise math shared by the CPU kernels and the CUDA kernels: each functor is
// __host__ __device__ when compiled by nvcc, so the CPU tests cover the arithmetic the GPU runs.
#ifndef DDP_TENSOR_FUNCTORS_H_
#define DDP_TENSOR_FUNCTORS_H_

#include <cmath>

#if defined(__CUDACC__)
#define DDP_HOST_DEVICE __host__ __device__
#else
#define DDP_HOST_DEVICE
#endif

namespace ddp {
namespace functors {

struct Add {
  DDP_HOST_DEVICE float operator()(float a, float b) const { return a + b; }
};
struct Sub {
  DDP_HOST_DEVICE float operator()(float a, float b) const { return a - b; }
};
struct Mul {
  DDP_HOST_DEVICE float operator()(float a, float b) const { return a * b; }
};
struct Div {
  DDP_HOST_DEVICE float operator()(float a, float b) const { return a / b; }
};
// a + alpha * b (in-place accumulation, SGD updates).
struct Axpy {
  float alpha;
  DDP_HOST_DEVICE float operator()(float a, float b) const { return a + alpha * b; }
};
// dst = src (copies into strided or broadcast destinations).
struct Assign {
  DDP_HOST_DEVICE float operator()(float, float src) const { return src; }
};
// dst = scale * src (the Reducer's pre-scaled gradient copy).
struct ScaledCopy {
  float scale;
  DDP_HOST_DEVICE float operator()(float, float src) const { return scale * src; }
};
struct AddScalar {
  float s;
  DDP_HOST_DEVICE float operator()(float a) const { return a + s; }
};
struct MulScalar {
  float s;
  DDP_HOST_DEVICE float operator()(float a) const { return a * s; }
};
struct Neg {
  DDP_HOST_DEVICE float operator()(float a) const { return -a; }
};
struct Relu {
  DDP_HOST_DEVICE float operator()(float a) const { return a > 0.0f ? a : 0.0f; }
};
// Gradient of relu: passes grad where the forward input was positive.
struct ReluBackward {
  DDP_HOST_DEVICE float operator()(float grad, float input) const { return input > 0.0f ? grad : 0.0f; }
};
struct Exp {
  DDP_HOST_DEVICE float operator()(float a) const { return expf(a); }
};
struct Log {
  DDP_HOST_DEVICE float operator()(float a) const { return logf(a); }
};
struct Sqrt {
  DDP_HOST_DEVICE float operator()(float a) const { return sqrtf(a); }
};
struct Fill {
  float value;
  DDP_HOST_DEVICE float operator()(float) const { return value; }
};

// LogSoftmax's gradient for one element of a row: g - softmax * (the row's sum of g), with the softmax
// recovered from the saved output y = log_softmax(x).
struct LogSoftmaxBackward {
  float row_gradient_sum;
  DDP_HOST_DEVICE float operator()(float g, float y) const { return g - expf(y) * row_gradient_sum; }
};
// CrossEntropy's gradient for one logit: (softmax - onehot) * scale, with scale = the loss gradient / rows,
// taken as softmax * scale less scale at the target.
struct CrossEntropyBackward {
  float scale;
  DDP_HOST_DEVICE float operator()(float log_prob, bool is_target) const {
    const float grad = expf(log_prob) * scale;
    return is_target ? grad - scale : grad;
  }
};

// One step of SGD with momentum and weight decay on one element (PyTorch's torch.optim.SGD).
struct SgdStep {
  float lr, momentum, dampening, weight_decay;
  bool nesterov, first_step;
  // Updates param and momentum buffer `buf` in place from gradient `grad`.
  DDP_HOST_DEVICE void operator()(float& param, float& buf, float grad) const {
    float d = grad + weight_decay * param;
    if (momentum != 0.0f) {
      buf = first_step ? d : momentum * buf + (1.0f - dampening) * d;
      d = nesterov ? d + momentum * buf : buf;
    }
    param -= lr * d;
  }
};

// One step of Adam / AdamW on one element (PyTorch's torch.optim.Adam(W), no amsgrad).
struct AdamStep {
  float lr, beta1, beta2, eps, weight_decay;
  float bias_correction1, bias_correction2;  // 1 - beta^t
  bool decoupled;                            // AdamW: decay the parameter, not the gradient
  DDP_HOST_DEVICE void operator()(float& param, float& m, float& v, float grad) const {
    if (decoupled) {
      param *= 1.0f - lr * weight_decay;
    } else {
      grad += weight_decay * param;
    }
    m = beta1 * m + (1.0f - beta1) * grad;
    v = beta2 * v + (1.0f - beta2) * grad * grad;
    const float denom = sqrtf(v) / sqrtf(bias_correction2) + eps;
    param -= (lr / bias_correction1) * m / denom;
  }
};

}  // namespace functors
}  // namespace ddp

#endif  // DDP_TENSOR_FUNCTORS_H_
