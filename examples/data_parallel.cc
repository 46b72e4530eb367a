// DataParallel: one process drives several devices, here CPU worker threads (torch.nn.DataParallel,
// dp/data_parallel.h). Each forward scatters the batch along dim 0 over the workers, replicates the
// module onto each, runs the replicas in parallel and gathers their outputs; backward sums the replicas'
// gradients into the wrapped module, so its optimizer steps it as usual. No process group, no launcher.
// The program first checks one step against the plain module, then trains on a synthetic task (labels
// from a fixed random linear "teacher"). The PyTorch twin:
//
//   model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 4))
//   dp = nn.DataParallel(model, device_ids=[0, 1])     # a batch of 64 runs as 32 + 32
//   opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)  # the wrapped model's parameters
//   for x, y in batches:
//       opt.zero_grad(); F.cross_entropy(dp(x), y).backward(); opt.step()
//
// Run: bazel-bin/examples/data_parallel
// It is one process, so it needs no ddprun: under `bazel-bin/launch/ddprun --nproc_per_node=2
// bazel-bin/examples/data_parallel` each of the two processes would run its own DataParallel, unaware of
// the other (combining them is DDP's job). Prints the loss every 25 steps and a last line with the
// chunk sizes, how far DataParallel is from the plain module, and the final loss.
#include "dp/data_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <utility>
#include <vector>

#include "dp/data_parallel_plan.h"
#include "nn/layers.h"
#include "nn/sgd.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

constexpr int64_t kSamples = 1024, kBatch = 64, kSteps = 100;

// inputs [kSamples, 20] ~ N(0, 1); labels [kSamples] = argmax(inputs @ teacher), 4 classes.
std::pair<Tensor, Tensor> MakeData(Generator& g) {
  Tensor inputs = Normal({kSamples, 20}, 0.0f, 1.0f, g);
  Tensor teacher = Normal({20, 4}, 0.0f, 1.0f, g);
  return {inputs, Argmax(Matmul(inputs, teacher), 1)};
}

// max |a - b| over the elements of two float32 tensors of the same shape.
float MaxDifference(const Tensor& a, const Tensor& b) {
  const std::vector<float> va = a.ToVector<float>(), vb = b.ToVector<float>();
  float diff = 0;
  for (size_t i = 0; i < va.size(); ++i) diff = std::max(diff, std::fabs(va[i] - vb[i]));
  return diff;
}

// The largest difference between `model`'s outputs and gradients on (x, y) run plainly and run through
// `dp` (which wraps `model`). Leaves gradients in the parameters; the caller zeroes them.
float DifferenceFromPlainModule(Module& model, DataParallel& dp, const Tensor& x, const Tensor& y) {
  const std::vector<Tensor> params = model.Parameters();
  Tensor plain_out = model.Forward(x);
  CrossEntropy(plain_out, y).Backward();
  std::vector<Tensor> plain_grads;
  for (const Tensor& p : params) plain_grads.push_back(Clone(p.grad()));
  model.ZeroGrad();
  Tensor dp_out = dp.Forward(x);       // scatter, replicate, parallel apply, gather
  CrossEntropy(dp_out, y).Backward();  // the replicas' gradients, summed into model's parameters
  float diff = MaxDifference(plain_out, dp_out);
  for (size_t i = 0; i < params.size(); ++i) {
    diff = std::max(diff, MaxDifference(plain_grads[i], params[i].grad()));
  }
  return diff;
}

// kSteps SGD steps through `dp` over the data in batches of kBatch; returns the last loss.
float TrainSteps(Module& model, DataParallel& dp, const Tensor& inputs, const Tensor& labels) {
  SgdOptions sgd;
  sgd.lr = 0.1f;
  sgd.momentum = 0.9f;
  Sgd optimizer(model.Parameters(), sgd);  // the wrapped module's parameters, as in PyTorch
  float loss_value = 0;
  for (int64_t step = 0; step < kSteps; ++step) {
    const int64_t start = (step * kBatch) % kSamples;
    model.ZeroGrad();
    Tensor loss =
        CrossEntropy(dp.Forward(Narrow(inputs, 0, start, kBatch)), Narrow(labels, 0, start, kBatch));
    loss.Backward();
    optimizer.Step();
    loss_value = static_cast<float>(loss.item());
    if (step % 25 == 0) std::printf("step %ld loss %.4f\n", static_cast<long>(step), loss_value);
  }
  return loss_value;
}

int Run() {
  Generator g(0);
  auto [inputs, labels] = MakeData(g);
  auto model = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<Module>>{
      std::make_shared<nn::Linear>(20, 32, g), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(32, 4, g)});
  DataParallelOptions options;
  options.device_ids = {0, 1};  // two CPU worker threads, each with its own replica
  options.kernel_threads_per_worker = 1;
  auto dp = DataParallel::Create(model, options);
  if (!dp.ok()) {
    std::fprintf(stderr, "data_parallel: %s\n", dp.status().ToString().c_str());
    return 1;
  }
  const float diff =
      DifferenceFromPlainModule(*model, **dp, Narrow(inputs, 0, 0, kBatch), Narrow(labels, 0, 0, kBatch));
  const float loss = TrainSteps(*model, **dp, inputs, labels);
  const std::vector<int64_t> chunks = ScatterSizes(kBatch, 2);  // how Forward splits a batch
  std::printf(
      "data_parallel: 2 CPU workers, batches of %ld scattered as %ld + %ld, outputs and gradients "
      "within %g of the plain module, final loss %.4f\n",
      static_cast<long>(kBatch), static_cast<long>(chunks[0]), static_cast<long>(chunks[1]), diff, loss);
  return diff < 1e-5f && loss < 0.5f ? 0 : 1;  // rounding differences only; it learned
}

}  // namespace
}  // namespace ddp

int main() { return ddp::Run(); }
