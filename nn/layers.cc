#include "nn/layers.h"

#include <cmath>
#include <typeinfo>

#include "absl/strings/str_cat.h"
#include "tensor/autograd.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace ddp {
namespace nn {
namespace {

// torch's kaiming_uniform_(a=sqrt(5)) and its bias init both reduce to U(-b, b), b = 1/sqrt(fan_in).
Tensor UniformInit(const Shape& shape, int64_t fan_in, Generator& generator) {
  const float bound = fan_in > 0 ? 1.0f / std::sqrt(static_cast<float>(fan_in)) : 0.0f;
  return Uniform(shape, -bound, bound, generator);
}

const char* PyBool(bool b) { return b ? "True" : "False"; }

}  // namespace

// ---- Linear ----

Linear::Linear(int64_t in_features, int64_t out_features, Generator& generator, bool bias)
    : Module("Linear"), in_features_(in_features), out_features_(out_features) {
  DDP_CHECK(in_features > 0 && out_features > 0)
      << "Linear(" << in_features << ", " << out_features << "): sizes must be positive";
  RegisterParameter("weight", UniformInit({out_features, in_features}, in_features, generator));
  if (bias) RegisterParameter("bias", UniformInit({out_features}, in_features, generator));
}

Tensor Linear::Forward(const Tensor& x) {
  DDP_CHECK(x.dim() == 2 && x.size(1) == in_features_)
      << "Linear(" << in_features_ << ", " << out_features_ << ") got input "
      << ShapeToString(x.shape()) << ", expected [n, " << in_features_ << "]";
  return ddp::Linear(x, weight(), bias());
}

std::string Linear::Describe() const {
  return absl::StrCat("Linear(in_features=", in_features_, ", out_features=", out_features_,
                      ", bias=", PyBool(bias().defined()), ")");
}

// ---- Conv2d ----

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Generator& generator,
               const Conv2dOptions& options)
    : Module("Conv2d"),
      in_channels_(in_channels),
      out_channels_(out_channels),
      kernel_size_(kernel_size),
      options_(options) {
  DDP_CHECK(in_channels > 0 && out_channels > 0 && kernel_size > 0 && options.stride > 0 &&
            options.padding >= 0)
      << "Conv2d(" << in_channels << ", " << out_channels << ", kernel " << kernel_size << ", stride "
      << options.stride << ", padding " << options.padding << "): invalid configuration";
  const int64_t fan_in = in_channels * kernel_size * kernel_size;
  RegisterParameter("weight",
                    UniformInit({out_channels, in_channels, kernel_size, kernel_size}, fan_in, generator));
  if (options.bias) RegisterParameter("bias", UniformInit({out_channels}, fan_in, generator));
}

void Conv2d::CheckInput(const Tensor& x) const {
  DDP_CHECK(x.dim() == 4 && x.size(1) == in_channels_)
      << "Conv2d(" << in_channels_ << ", " << out_channels_ << ") got input " << ShapeToString(x.shape())
      << ", expected [n, " << in_channels_ << ", h, w]";
}

Tensor Conv2d::Forward(const Tensor& x) {
  CheckInput(x);
  return ddp::Conv2d(x, weight(), bias(), options_.stride, options_.padding);
}

Tensor Conv2d::ForwardReluMaxPool(const Tensor& x, const MaxPool2d& pool) {
  CheckInput(x);
  return ddp::Conv2dReluMaxPool2d(x, weight(), bias(), options_.stride, options_.padding, pool.kernel_size(),
                                  pool.stride());
}

std::string Conv2d::Describe() const {
  std::string out = absl::StrCat("Conv2d(", in_channels_, ", ", out_channels_, ", kernel_size=(",
                                 kernel_size_, ", ", kernel_size_, "), stride=(", options_.stride, ", ",
                                 options_.stride, ")");
  if (options_.padding != 0) {
    absl::StrAppend(&out, ", padding=(", options_.padding, ", ", options_.padding, ")");
  }
  if (!options_.bias) absl::StrAppend(&out, ", bias=False");
  return out + ")";
}

// ---- ReLU ----

Tensor ReLU::Forward(const Tensor& x) { return Relu(x); }

// ---- MaxPool2d ----

MaxPool2d::MaxPool2d(int64_t kernel_size, int64_t stride)
    : Module("MaxPool2d"), kernel_size_(kernel_size), stride_(stride == 0 ? kernel_size : stride) {
  DDP_CHECK(kernel_size > 0 && stride >= 0)
      << "MaxPool2d(kernel " << kernel_size << ", stride " << stride << "): invalid configuration";
}

Tensor MaxPool2d::Forward(const Tensor& x) { return ddp::MaxPool2d(x, kernel_size_, stride_); }

Tensor MaxPool2d::ForwardOfRelu(const Tensor& x) { return ddp::MaxPool2dOfRelu(x, kernel_size_, stride_); }

std::string MaxPool2d::Describe() const {
  return absl::StrCat("MaxPool2d(kernel_size=", kernel_size_, ", stride=", stride_,
                      ", padding=0, dilation=1, ceil_mode=False)");
}

// ---- AdaptiveAvgPool2d ----

AdaptiveAvgPool2d::AdaptiveAvgPool2d(int64_t output_size) : Module("AdaptiveAvgPool2d") {
  DDP_CHECK(output_size == 1) << "AdaptiveAvgPool2d(output_size=" << output_size
                              << "): only output size 1 (global average pooling) is implemented";
}

Tensor AdaptiveAvgPool2d::Forward(const Tensor& x) {
  DDP_CHECK(x.dim() == 4 && x.size(2) > 0 && x.size(3) > 0)
      << "AdaptiveAvgPool2d got input " << ShapeToString(x.shape()) << ", expected [n, c, h, w] with h, w >= 1";
  return Mean(x, {2, 3}, /*keepdim=*/true);
}

std::string AdaptiveAvgPool2d::Describe() const { return "AdaptiveAvgPool2d(output_size=(1, 1))"; }

// ---- BatchNorm2d ----

BatchNorm2d::BatchNorm2d(int64_t num_features, float eps, float momentum)
    : Module("BatchNorm2d"), num_features_(num_features), eps_(eps), momentum_(momentum) {
  DDP_CHECK(num_features > 0 && eps > 0.0f && momentum >= 0.0f && momentum <= 1.0f)
      << "BatchNorm2d(" << num_features << ", eps=" << eps << ", momentum=" << momentum
      << "): invalid configuration";
  RegisterParameter("weight", Ones({num_features}));
  RegisterParameter("bias", Zeros({num_features}));
  RegisterBuffer("running_mean", Zeros({num_features}));
  RegisterBuffer("running_var", Ones({num_features}));
  RegisterBuffer("num_batches_tracked", Zeros({}, DType::kInt64));
}

void IncrementBatchCount(const Tensor& count) {
  DDP_CHECK(count.dtype() == DType::kInt64 && count.numel() == 1) << "IncrementBatchCount needs an int64 scalar";
  if (count.device().is_cpu()) {
    ++*count.data<int64_t>();
    return;
  }
  const int64_t next = static_cast<int64_t>(count.item()) + 1;
  CopyInPlace(count, FromVector(std::vector<int64_t>{next}, {}));
}

Tensor BatchNorm2d::Forward(const Tensor& x) {
  DDP_CHECK(x.dim() == 4 && x.size(1) == num_features_)
      << "BatchNorm2d(" << num_features_ << ") got input " << ShapeToString(x.shape())
      << ", expected [n, " << num_features_ << ", h, w]";
  if (is_training()) IncrementBatchCount(num_batches_tracked());
  return BatchNorm(x, weight(), bias(), running_mean(), running_var(), is_training(), momentum_, eps_);
}

std::string BatchNorm2d::Describe() const {
  return absl::StrCat("BatchNorm2d(", num_features_, ", eps=", eps_, ", momentum=", momentum_,
                      ", affine=True, track_running_stats=True)");
}

// ---- Dropout ----

Dropout::Dropout(float p, uint64_t seed) : Module("Dropout"), p_(p), generator_(seed) {
  DDP_CHECK(p >= 0.0f && p < 1.0f) << "Dropout(p=" << p << "): p must be in [0, 1)";
}

Tensor Dropout::Forward(const Tensor& x) { return ddp::Dropout(x, p_, is_training(), generator_); }

std::string Dropout::Describe() const { return absl::StrCat("Dropout(p=", p_, ", inplace=False)"); }

// ---- Flatten ----

Flatten::Flatten(int64_t start_dim, int64_t end_dim)
    : Module("Flatten"), start_dim_(start_dim), end_dim_(end_dim) {}

Tensor Flatten::Forward(const Tensor& x) { return ddp::Flatten(x, start_dim_, end_dim_); }

std::string Flatten::Describe() const {
  return absl::StrCat("Flatten(start_dim=", start_dim_, ", end_dim=", end_dim_, ")");
}

// ---- Sequential ----

Sequential::Sequential(const std::vector<std::shared_ptr<Module>>& modules) : Sequential() {
  for (const auto& m : modules) Add(m);
}

Sequential::Sequential(const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& modules)
    : Sequential() {
  for (const auto& [name, m] : modules) Add(name, m);
}

Sequential& Sequential::Add(std::shared_ptr<Module> module) {
  return Add(std::to_string(NamedChildren().size()), std::move(module));
}

Sequential& Sequential::Add(const std::string& name, std::shared_ptr<Module> module) {
  RegisterModule(name, std::move(module));
  return *this;
}

namespace {

using Children = std::vector<std::pair<std::string, std::shared_ptr<Module>>>;

// True when children[at] exists and is exactly a T (not a subclass, which may override Forward).
template <typename T>
bool ChildIs(const Children& children, size_t at) {
  return at < children.size() && typeid(*children[at].second) == typeid(T);
}

template <typename T>
T& ChildAs(const Children& children, size_t at) {
  return static_cast<T&>(*children[at].second);
}

// Runs the block of Note [Fusion in Sequential] that starts at children[i], if one does, on *y; returns
// how many children it ran (0: none starts there).
size_t RunFusedBlock(const Children& children, size_t i, Tensor* y) {
  if (ChildIs<Conv2d>(children, i) && ChildIs<ReLU>(children, i + 1) && ChildIs<MaxPool2d>(children, i + 2)) {
    auto& conv = ChildAs<Conv2d>(children, i);
    const auto& pool = ChildAs<MaxPool2d>(children, i + 2);
    *y = conv.CallAs(*y, [&](const Tensor& x) { return conv.ForwardReluMaxPool(x, pool); });
    return 3;
  }
  if (ChildIs<ReLU>(children, i) && ChildIs<MaxPool2d>(children, i + 1)) {
    auto& pool = ChildAs<MaxPool2d>(children, i + 1);
    *y = ChildAs<ReLU>(children, i).CallAs(*y, [&](const Tensor& x) { return pool.ForwardOfRelu(x); });
    return 2;
  }
  return 0;
}

}  // namespace

Tensor Sequential::Forward(const Tensor& x) {
  const auto& children = NamedChildren();
  Tensor y = x;
  for (size_t i = 0; i < children.size();) {
    const size_t ran = fuse_blocks_ ? RunFusedBlock(children, i, &y) : 0;
    if (ran > 0) {
      i += ran;
      continue;
    }
    y = (*children[i].second)(y);  // Note [Module call observer]
    ++i;
  }
  return y;
}

}  // namespace nn
}  // namespace ddp
