// The layers of torch.nn that the example models use, with PyTorch's parameter names, layouts and
// default initialisation (drawn from an explicit Generator, so values differ from PyTorch's but their
// distribution does not). Thread safety: as Module.
//
// The layers live in ddp::nn because several share their names with the functional ops of
// tensor/ops.h (ddp::Linear, ddp::Conv2d, ...), as torch.nn.Linear and torch.nn.functional.linear do.
#ifndef DDP_NN_LAYERS_H_
#define DDP_NN_LAYERS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nn/module.h"
#include "tensor/random.h"

namespace ddp {
namespace nn {

// y = x W^T + b with x [n, in_features], W "weight" [out_features, in_features], b "bias"
// [out_features]. Init as torch: W, b ~ U(-1/sqrt(in_features), 1/sqrt(in_features)) from `generator`
// (weight first, then bias).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, Generator& generator, bool bias = true);
  Tensor Forward(const Tensor& x) override;
  std::shared_ptr<Module> Replicate() const override { return ReplicateAs(*this); }

  Tensor weight() const { return GetParameter("weight"); }
  Tensor bias() const { return GetParameter("bias"); }  // undefined without bias
  int64_t in_features() const { return in_features_; }
  int64_t out_features() const { return out_features_; }

 protected:
  std::string Describe() const override;

 private:
  int64_t in_features_, out_features_;
};

struct Conv2dOptions {
  int64_t stride = 1;   // same stride in both spatial dimensions
  int64_t padding = 0;  // zero padding on every side
  bool bias = true;     // whether the layer has a "bias" parameter
};

class MaxPool2d;

// torch.nn.Conv2d with a square kernel: x [n, in_channels, h, w] -> [n, out_channels, h', w'].
// "weight" [out_channels, in_channels, kernel, kernel], "bias" [out_channels]. Init as torch: weight and
// bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in_channels * kernel * kernel.
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Generator& generator,
         const Conv2dOptions& options = {});
  Tensor Forward(const Tensor& x) override;
  std::shared_ptr<Module> Replicate() const override { return ReplicateAs(*this); }

  Tensor weight() const { return GetParameter("weight"); }
  Tensor bias() const { return GetParameter("bias"); }
  const Conv2dOptions& options() const { return options_; }
  // pool.Forward(Relu(Forward(x))) as one op (Conv2dReluMaxPool2d: the same values and gradients without
  // the full-size convolution output): what Sequential runs for this layer followed by a ReLU and `pool`
  // (Note [Fusion in Sequential]).
  Tensor ForwardReluMaxPool(const Tensor& x, const MaxPool2d& pool);

 protected:
  std::string Describe() const override;

 private:
  // Dies through DDP_CHECK naming the layer when x is not [n, in_channels, h, w].
  void CheckInput(const Tensor& x) const;

  int64_t in_channels_, out_channels_, kernel_size_;
  Conv2dOptions options_;
};

// max(x, 0) element-wise.
class ReLU : public Module {
 public:
  ReLU() : Module("ReLU") {}
  Tensor Forward(const Tensor& x) override;
  std::shared_ptr<Module> Replicate() const override { return ReplicateAs(*this); }
};

// Max over kernel x kernel windows of x [n, c, h, w]; stride 0 means stride = kernel (as torch).
class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(int64_t kernel_size, int64_t stride = 0);
  Tensor Forward(const Tensor& x) override;
  // Forward(Relu(x)) in one pass over x (MaxPool2dOfRelu, same values and gradients): what Sequential
  // runs for a ReLU child followed by this one (Note [Fusion in Sequential]).
  Tensor ForwardOfRelu(const Tensor& x);
  int64_t kernel_size() const { return kernel_size_; }
  int64_t stride() const { return stride_; }
  std::shared_ptr<Module> Replicate() const override { return ReplicateAs(*this); }

 protected:
  std::string Describe() const override;

 private:
  int64_t kernel_size_, stride_;
};

// torch.nn.AdaptiveAvgPool2d(1), global average pooling: x [n, c, h, w] -> [n, c, 1, 1], the mean of each
// plane (Mean over dims 2 and 3). Only output size 1 exists here; another is a construction error.
class AdaptiveAvgPool2d : public Module {
 public:
  // REQUIRES: output_size == 1.
  explicit AdaptiveAvgPool2d(int64_t output_size = 1);
  Tensor Forward(const Tensor& x) override;
  std::shared_ptr<Module> Replicate() const override { return ReplicateAs(*this); }

 protected:
  std::string Describe() const override;
};

// Adds 1 to BatchNorm's int64 scalar "num_batches_tracked" in place, on whatever device it lives
// (BatchNorm2d and SyncBatchNorm2d share it). REQUIRES: an int64 tensor of one element.
void IncrementBatchCount(const Tensor& count);

// torch.nn.BatchNorm2d(num_features, eps, momentum) with affine=True and track_running_stats=True.
// Parameters "weight" (ones) and "bias" (zeros) [c]; buffers "running_mean" (zeros), "running_var"
// (ones) [c] and "num_batches_tracked" (int64 scalar, +1 per training forward). Training forward
// normalises with batch statistics and updates the running ones; eval uses the running ones.
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t num_features, float eps = 1e-5f, float momentum = 0.1f);
  Tensor Forward(const Tensor& x) override;
  std::shared_ptr<Module> Replicate() const override { return ReplicateAs(*this); }

  Tensor weight() const { return GetParameter("weight"); }
  Tensor bias() const { return GetParameter("bias"); }
  Tensor running_mean() const { return GetBuffer("running_mean"); }
  Tensor running_var() const { return GetBuffer("running_var"); }
  Tensor num_batches_tracked() const { return GetBuffer("num_batches_tracked"); }
  int64_t num_features() const { return num_features_; }
  float eps() const { return eps_; }
  float momentum() const { return momentum_; }

 protected:
  std::string Describe() const override;

 private:
  int64_t num_features_;
  float eps_, momentum_;
};

// In training mode zeroes each element with probability p and scales the rest by 1/(1-p); identity in
// eval mode. The mask comes from the layer's own Generator, seeded with `seed` at construction (a
// replica continues from a copy of the generator's state). REQUIRES: 0 <= p < 1.
class Dropout : public Module {
 public:
  explicit Dropout(float p = 0.5f, uint64_t seed = 0);
  Tensor Forward(const Tensor& x) override;
  std::shared_ptr<Module> Replicate() const override { return ReplicateAs(*this); }

  float p() const { return p_; }
  Generator& generator() { return generator_; }

 protected:
  std::string Describe() const override;

 private:
  float p_;
  Generator generator_;
};

// Merges dimensions [start_dim, end_dim] (torch.nn.Flatten; defaults keep the batch dimension).
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1);
  Tensor Forward(const Tensor& x) override;
  std::shared_ptr<Module> Replicate() const override { return ReplicateAs(*this); }

 protected:
  std::string Describe() const override;

 private:
  int64_t start_dim_, end_dim_;
};

// Runs its children in order. Unnamed children are called "0", "1", ... (torch.nn.Sequential); named
// ones keep their names, so Sequential({{"fc1", fc1}, {"relu", relu}}) has parameters "fc1.weight"...
//
// Note [Fusion in Sequential]
// Children that form a CNN block run as one op, with the same values and gradients bit for bit (only
// exactly these classes, not subclasses, which may override Forward):
//   * Conv2d, ReLU, MaxPool2d: Conv2dReluMaxPool2d (Note [Conv2d, ReLU and MaxPool2d in one op],
//     tensor/ops_conv_pool.cc): the convolution's full-size output is never made;
//   * ReLU, MaxPool2d (e.g. after a BatchNorm2d): MaxPool2dOfRelu (Note [ReLU then MaxPool2d in one pass],
//     tensor/ops_pool.cc): two passes over the activation fewer in forward and two in backward.
// BENCHMARKS.md has what each saves on the MNIST cnn. A module call observer sees a block as one call of
// its first module (the per-module trace slices of ddp/module_trace.h show the block under the Conv2d's or
// the ReLU's name, as it ran, so a traced run times what an untraced one runs). After
// set_fuse_blocks(false) the children run one by one, as PyTorch eager runs them.
class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  explicit Sequential(const std::vector<std::shared_ptr<Module>>& modules);
  explicit Sequential(const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& modules);
  Tensor Forward(const Tensor& x) override;
  std::shared_ptr<Module> Replicate() const override { return ReplicateAs(*this); }

  // Whether Forward runs the blocks of Note [Fusion in Sequential] as one op; on by default, kept by
  // Replicate. Returns *this.
  Sequential& set_fuse_blocks(bool fuse) {
    fuse_blocks_ = fuse;
    return *this;
  }
  bool fuse_blocks() const { return fuse_blocks_; }

  // Appends a child named by its position ("3"), or by `name`. Returns *this.
  Sequential& Add(std::shared_ptr<Module> module);
  Sequential& Add(const std::string& name, std::shared_ptr<Module> module);
  size_t size() const { return NamedChildren().size(); }

 private:
  bool fuse_blocks_ = true;
};

}  // namespace nn
}  // namespace ddp

#endif  // DDP_NN_LAYERS_H_
