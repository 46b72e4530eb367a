// A model with two inputs and two outputs under DDP: the upper and the lower half of each Fashion-MNIST
// image go through a tower each; the joined features give the class logits and an auxiliary output, the
// coarse group of the item (clothing, footwear, bag). The model overrides ForwardMany (nn/module.h, Note
// [Modules with several inputs and outputs]): named inputs in, named outputs out. The auxiliary loss is
// added on even steps only, so on odd steps the coarse head gets no gradient: find_unused_parameters
// lets DDP search both outputs and accept the head left out. Each step accumulates two micro-batches,
// the first under NoSync, and the buckets travel through the fp16 comm hook. The PyTorch twin:
//
//   class TwoHalves(nn.Module):
//       def __init__(self):
//           super().__init__()
//           self.upper, self.lower = nn.Linear(392, 64), nn.Linear(392, 64)
//           self.head, self.coarse = nn.Linear(128, 10), nn.Linear(128, 3)
//       def forward(self, upper, lower):
//           h = torch.relu(torch.cat([self.upper(upper), self.lower(lower)], 1))
//           return {"logits": self.head(h), "coarse": self.coarse(h)}
//   model = DDP(TwoHalves(), find_unused_parameters=True)
//   model.register_comm_hook(None, default_hooks.fp16_compress_hook)
//   for step, ...:
//       for micro, (x, y) in enumerate(two_micro_batches):
//           with model.no_sync() if micro == 0 else nullcontext():
//               out = model(x[:, :, :14].flatten(1), lower=x[:, :, 14:].flatten(1))
//               loss = F.cross_entropy(out["logits"], y)
//               if step % 2 == 0: loss = loss + 0.3 * F.cross_entropy(out["coarse"], COARSE[y])
//               (loss / 2).backward()
//       optimizer.step(); optimizer.zero_grad()
//
// Run: bazel-bin/launch/ddprun --nproc_per_node=2 bazel-bin/examples/two_input_model
// Prints the losses every 50 steps on rank 0 and a last line with the final losses and whether every
// rank ended with the same parameters.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "comm/init.h"
#include "data/fashion_mnist.h"
#include "ddp/distributed_data_parallel.h"
#include "nn/layers.h"
#include "nn/sgd.h"
#include "reducer/comm_hook.h"
#include "tensor/autograd.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

constexpr int kSteps = 150;         // optimizer steps per rank
constexpr int kMicroBatches = 2;    // accumulated per step; all but the last under NoSync
constexpr int64_t kMicroRows = 32;  // rows per micro-batch and rank
constexpr float kCoarseWeight = 0.3f;

// Exits with the message when `status` is an error (a real program would handle it).
void OrDie(const absl::Status& status) {
  if (status.ok()) return;
  std::fprintf(stderr, "two_input_model: %s\n", status.ToString().c_str());
  std::exit(1);
}

// The user's model. Inputs "upper" and "lower" ([n, 392] each, positional or named); outputs "logits"
// [n, 10] and "coarse" [n, 3]. Children are registered in PyTorch's attribute order and reached through
// Child(), so the default Replicate() deep-copies it correctly.
class TwoHalves : public Module {
 public:
  explicit TwoHalves(Generator& g) : Module("TwoHalves") {
    RegisterModule("upper", std::make_shared<nn::Linear>(392, 64, g));
    RegisterModule("lower", std::make_shared<nn::Linear>(392, 64, g));
    RegisterModule("head", std::make_shared<nn::Linear>(128, 10, g));
    RegisterModule("coarse", std::make_shared<nn::Linear>(128, 3, g));
  }

  TensorList ForwardMany(const TensorList& inputs) override {
    // forward(self, upper, lower): aborts naming a missing or extra input.
    const std::vector<Tensor> in = BindInputs(inputs, {"upper", "lower"});
    const Tensor h = Relu(Cat({(*Child("upper"))(in[0]), (*Child("lower"))(in[1])}, 1));
    return {{"logits", (*Child("head"))(h)}, {"coarse", (*Child("coarse"))(h)}};
  }

  std::shared_ptr<Module> Replicate() const override { return ReplicateAs(*this); }
};

// Fashion-MNIST's coarse groups: 0 clothing, 1 footwear (sandal, sneaker, ankle boot), 2 bag.
Tensor CoarseOf(const Tensor& labels) {
  static constexpr int64_t kGroup[10] = {0, 0, 0, 0, 0, 1, 0, 1, 2, 1};
  std::vector<int64_t> coarse;
  for (int64_t label : labels.ToVector<int64_t>()) coarse.push_back(kGroup[label]);
  return FromVector(coarse, labels.shape());
}

// Rows [first, first + 14) of images [n, 1, 28, 28], flattened to [n, 392].
Tensor HalfOf(const Tensor& images, int64_t first) {
  return Flatten(Contiguous(Narrow(images, 2, first, 14)));
}

// The largest difference between this rank's parameters and rank 0's, over all ranks (collective).
float MaxDifferenceFromRankZero(const Module& model, ProcessGroup& group) {
  NoGradGuard no_grad;
  std::vector<Tensor> flat;
  for (const Tensor& p : model.Parameters()) flat.push_back(Reshape(p, {p.numel()}));
  Tensor mine = Cat(flat, 0), rank_zero = Clone(mine);
  OrDie(group.Broadcast(rank_zero, 0)->Wait(group.timeout()));
  const std::vector<float> a = mine.ToVector<float>(), b = rank_zero.ToVector<float>();
  float diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff = std::max(diff, std::fabs(a[i] - b[i]));
  Tensor worst = FromVector(std::vector<float>{diff}, {1});
  OrDie(group.AllReduce(worst, ReduceOp::kMax)->Wait(group.timeout()));
  return worst.ToVector<float>()[0];
}

struct Losses {
  float logits = 0, coarse = 0;  // the last micro-batch's, the coarse one from the last step that used it
};

// One micro-batch's forward and backward through DDP; returns its losses.
Losses MicroStep(DistributedDataParallel& ddp_model, const Example& batch, bool with_coarse) {
  const TensorList out =
      ddp_model.ForwardMany({{"upper", HalfOf(batch.input, 0)}, {"lower", HalfOf(batch.input, 14)}});
  Losses losses;
  Tensor loss = CrossEntropy(out.Get("logits"), batch.target);
  losses.logits = static_cast<float>(loss.item());
  if (with_coarse) {  // left out on odd steps: the coarse head gets no gradient then
    const Tensor coarse = CrossEntropy(out.Get("coarse"), CoarseOf(batch.target));
    losses.coarse = static_cast<float>(coarse.item());
    loss = loss + coarse * kCoarseWeight;
  }
  (loss * (1.0f / kMicroBatches)).Backward();  // synchronising only outside NoSync
  return losses;
}

// kSteps steps on samples rank, rank + world, ... of the training set; returns rank 0's last losses.
Losses TrainSteps(DistributedDataParallel& ddp_model, int rank, int world) {
  auto train = LoadFashionMnist(kDefaultFashionMnistDir, Split::kTrain);
  OrDie(train.status());
  SgdOptions sgd;
  sgd.lr = 0.05f;
  sgd.momentum = 0.9f;
  Sgd optimizer(ddp_model.module().Parameters(), sgd);
  Losses last;
  for (int step = 0; step < kSteps; ++step) {
    ddp_model.module().ZeroGrad();
    for (int micro = 0; micro < kMicroBatches; ++micro) {
      std::vector<int64_t> indices;
      for (int64_t i = 0; i < kMicroRows; ++i) {
        indices.push_back(((step * kMicroBatches + micro) * kMicroRows + i) * world + rank);
      }
      const Example batch = *(*train)->GetBatch(indices);
      const bool with_coarse = step % 2 == 0;
      Losses losses;
      if (micro + 1 < kMicroBatches) {
        auto no_sync = ddp_model.NoSync();  // accumulate locally, no communication
        losses = MicroStep(ddp_model, batch, with_coarse);
      } else {
        losses = MicroStep(ddp_model, batch, with_coarse);
      }
      last.logits = losses.logits;
      if (with_coarse) last.coarse = losses.coarse;
    }
    OrDie(ddp_model.status());
    optimizer.Step();
    if (rank == 0 && step % 50 == 0) std::printf("step %d loss %.4f coarse %.4f\n", step, last.logits, last.coarse);
  }
  return last;
}

void Train() {
  auto dist = InitProcessGroup(InitOptions{});  // RANK, WORLD_SIZE, ... as ddprun set them
  OrDie(dist.status());
  ProcessGroup& group = *(*dist)->group;
  Generator generator(0);
  auto model = std::make_shared<TwoHalves>(generator);
  DdpOptions options;
  options.reducer.find_unused_parameters = true;  // search both outputs; the coarse head may sit out
  auto ddp_model = DistributedDataParallel::Create(model, &group, options);
  OrDie(ddp_model.status());
  OrDie((*ddp_model)->RegisterCommHook(*MakeCommHook("fp16")));  // before the first forward
  const Losses losses = TrainSteps(**ddp_model, group.rank(), group.size());
  const float diff = MaxDifferenceFromRankZero(*model, group);
  if (group.rank() == 0) {
    std::printf(
        "two_input_model: %d steps on %d ranks, %d micro-batches of %ld per step, coarse head on every "
        "other step, final loss %.4f (coarse %.4f), max parameter difference across ranks %g (%s)\n",
        kSteps, group.size(), kMicroBatches, static_cast<long>(kMicroRows), losses.logits, losses.coarse, diff,
        diff == 0 ? "ranks agree" : "RANKS DIFFER");
  }
  if (diff != 0) std::exit(1);
}

}  // namespace
}  // namespace ddp

int main() {
  ddp::Train();
  return 0;
}
