// A model of your own under DDP: a Module subclass registers its parameters and child modules under
// PyTorch's dotted names, writes its own Forward, and trains under DistributedDataParallel on
// Fashion-MNIST exactly as the built-in models of examples/minimal_ddp.cc do. The batches come from a
// DistributedSampler and a DataLoader, as in PyTorch. The PyTorch twin:
//
//   class SmallCnn(nn.Module):
//       def __init__(self):
//           super().__init__()
//           self.logit_scale = nn.Parameter(torch.ones(1))
//           self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
//           self.classifier = nn.Sequential(nn.Linear(8 * 14 * 14, 64), nn.ReLU(), nn.Linear(64, 10))
//       def forward(self, x):
//           x = F.max_pool2d(F.relu(self.conv1(x)), 2)
//           return self.classifier(x.flatten(1)) * self.logit_scale
//   model = DDP(SmallCnn())
//   loader = DataLoader(train, batch_size=32, sampler=DistributedSampler(train), drop_last=True)
//
// Run: bazel-bin/launch/ddprun --nproc_per_node=2 bazel-bin/examples/custom_model
// Prints the model and its parameter names on rank 0, the loss every 50 steps, and a last line with
// the final loss and whether every rank ended with the same parameters.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "comm/init.h"
#include "data/data_loader.h"
#include "data/fashion_mnist.h"
#include "data/sampler.h"
#include "ddp/distributed_data_parallel.h"
#include "nn/layers.h"
#include "nn/sgd.h"
#include "tensor/autograd.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

constexpr int kSteps = 150;  // per rank, batches of 32

// Exits with the message when `status` is an error (a real program would handle it).
void OrDie(const absl::Status& status) {
  if (status.ok()) return;
  std::fprintf(stderr, "custom_model: %s\n", status.ToString().c_str());
  std::exit(1);
}

// The user's model. Everything it owns is registered in the constructor, in PyTorch's attribute order,
// so NamedParameters() and StateDict() give "logit_scale", "conv1.weight", "conv1.bias",
// "classifier.0.weight", ... (a module's own parameters first, then each child's). Forward reaches its
// children through Child(), never through members of its own, so the default Replicate() (ReplicateAs)
// deep-copies it correctly. RegisterBuffer works the same way for state that is saved but not trained.
class SmallCnn : public Module {
 public:
  explicit SmallCnn(Generator& g) : Module("SmallCnn") {
    RegisterParameter("logit_scale", Ones({1}));  // nn.Parameter(torch.ones(1))
    nn::Conv2dOptions pad1;
    pad1.padding = 1;
    RegisterModule("conv1", std::make_shared<nn::Conv2d>(1, 8, 3, g, pad1));
    RegisterModule("classifier", std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<Module>>{
                                     std::make_shared<nn::Linear>(8 * 14 * 14, 64, g),  // "classifier.0"
                                     std::make_shared<nn::ReLU>(),                      // "classifier.1"
                                     std::make_shared<nn::Linear>(64, 10, g)}));        // "classifier.2"
  }

  // x [n, 1, 28, 28] -> logits [n, 10]. Children are called with operator() (PyTorch's __call__).
  Tensor Forward(const Tensor& x) override {
    Tensor h = MaxPool2d(Relu((*Child("conv1"))(x)), 2);  // [n, 8, 14, 14]
    Tensor logits = (*Child("classifier"))(Flatten(h));
    return logits * GetParameter("logit_scale");  // [n, 10] * [1] broadcasts
  }

  std::shared_ptr<Module> Replicate() const override { return ReplicateAs(*this); }
};

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

// This rank's shard of the training set, shuffled per epoch, in batches of 32.
std::unique_ptr<DataLoader> MakeLoader(int rank, int world) {
  auto train = LoadFashionMnist(kDefaultFashionMnistDir, Split::kTrain);
  OrDie(train.status());
  DistributedSamplerOptions shard;
  shard.num_replicas = world;
  shard.rank = rank;
  auto sampler = DistributedSampler::Create((*train)->Size(), shard);
  OrDie(sampler.status());
  DataLoaderOptions options;
  options.batch_size = 32;
  options.drop_last = true;
  auto loader = DataLoader::Create(*train, std::move(*sampler), options);
  OrDie(loader.status());
  OrDie((*loader)->Begin());  // epoch 0 (sampler()->SetEpoch(e) before Begin() for later epochs)
  return std::move(*loader);
}

// kSteps steps of DDP training; returns this rank's last loss.
float TrainSteps(DistributedDataParallel& ddp_model, DataLoader& loader, int rank) {
  Module& model = ddp_model.module();
  SgdOptions sgd;
  sgd.lr = 0.05f;
  sgd.momentum = 0.9f;
  Sgd optimizer(model.Parameters(), sgd);
  float loss_value = 0;
  for (int step = 0; step < kSteps; ++step) {
    auto batch = loader.Next();  // std::nullopt at the end of the epoch (far beyond kSteps here)
    OrDie(batch.status());
    model.ZeroGrad();
    Tensor loss = CrossEntropy(ddp_model.Forward((*batch)->input), (*batch)->target);
    loss.Backward();  // gradients are averaged across ranks during this call
    OrDie(ddp_model.status());
    optimizer.Step();
    loss_value = static_cast<float>(loss.item());
    if (rank == 0 && step % 50 == 0) std::printf("step %d loss %.4f\n", step, loss_value);
  }
  return loss_value;
}

void Train() {
  auto dist = InitProcessGroup(InitOptions{});  // RANK, WORLD_SIZE, ... as ddprun set them
  OrDie(dist.status());
  ProcessGroup& group = *(*dist)->group;
  Generator generator(0);
  auto model = std::make_shared<SmallCnn>(generator);
  model->AssignTensorNames();  // error messages and traces then say "conv1.weight"
  if (group.rank() == 0) {     // print(model), then the dotted names PyTorch's named_parameters() gives
    std::printf("%s\n", model->ToString().c_str());
    for (const auto& [name, p] : model->NamedParameters()) {
      std::printf("  %s %s\n", name.c_str(), ShapeToString(p.shape()).c_str());
    }
  }
  auto ddp_model = DistributedDataParallel::Create(model, &group);  // state dict: "module.conv1.weight"
  OrDie(ddp_model.status());
  std::unique_ptr<DataLoader> loader = MakeLoader(group.rank(), group.size());
  const float loss = TrainSteps(**ddp_model, *loader, group.rank());
  const float diff = MaxDifferenceFromRankZero(*model, group);
  if (group.rank() == 0) {
    std::printf(
        "custom_model: %d steps on %d ranks, final loss %.4f, max parameter difference across "
        "ranks %g (%s)\n",
        kSteps, group.size(), loss, diff, diff == 0 ? "ranks agree" : "RANKS DIFFER");
  }
  if (diff != 0) std::exit(1);
}

}  // namespace
}  // namespace ddp

int main() {
  ddp::Train();
  return 0;
}
