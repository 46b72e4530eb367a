// A program outside the engine's tree: trains a small regression model with DDP on 2 ranks, which it
// starts itself (Spawn, as torch.multiprocessing.spawn), and checks that both ranks end with the same
// weights. It includes only the engine's public headers and depends on one target,
// @ddpengine//examples/external_workspace:ddpengine. Run: bazel run //:two_rank_ddp
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "comm/init.h"
#include "ddp/distributed_data_parallel.h"
#include "launch/spawn.h"
#include "nn/layers.h"
#include "nn/sgd.h"
#include "tensor/autograd.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace {

// y = x . w_true + noise, 8 features; each rank draws its own batches (its shard of the data).
absl::Status TrainOneRank(int spawned_rank) {
  auto dist = ddp::InitProcessGroup(ddp::InitOptions{});  // RANK, WORLD_SIZE, ... that Spawn set
  if (!dist.ok()) return dist.status();
  ddp::ProcessGroup& group = *(*dist)->group;
  const int rank = group.rank();
  ddp::Generator init(0);
  auto model = std::make_shared<ddp::nn::Linear>(8, 1, init);
  auto wrapped = ddp::DistributedDataParallel::Create(model, &group);
  if (!wrapped.ok()) return wrapped.status();
  ddp::SgdOptions sgd;
  sgd.lr = 0.05f;
  ddp::Sgd optimizer(model->Parameters(), sgd);
  ddp::Generator data(100 + rank);
  const ddp::Tensor w_true = ddp::FromVector(std::vector<float>{1, -2, 3, -4, 5, -6, 7, -8}, {8, 1});
  float loss_value = 0;
  for (int step = 0; step < 200; ++step) {
    ddp::Tensor x = ddp::Normal({32, 8}, 0, 1, data);
    ddp::Tensor y = ddp::Matmul(x, w_true);
    model->ZeroGrad();
    ddp::Tensor diff = (*wrapped)->Forward(x) - y;
    ddp::Tensor loss = ddp::Mean(diff * diff);
    loss.Backward();  // gradients are averaged across the 2 ranks here
    if (!(*wrapped)->status().ok()) return (*wrapped)->status();
    optimizer.Step();
    loss_value = static_cast<float>(loss.item());
  }
  // Both ranks must hold rank 0's weights: compare with a broadcast copy.
  ddp::Tensor mine = ddp::Clone(model->Parameters()[0]);
  ddp::Tensor zero = ddp::Clone(mine);
  absl::Status sent = group.Broadcast(zero, 0)->Wait(group.timeout());
  if (!sent.ok()) return sent;
  const std::vector<float> a = mine.ToVector<float>(), b = zero.ToVector<float>();
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return absl::InternalError("rank weights differ after DDP training");
  }
  std::printf("rank %d of %d: loss %.6f, w[0] %.3f (true 1), weights equal on every rank\n", rank, group.size(),
              loss_value, a[0]);
  if (loss_value > 1e-3f) return absl::InternalError("DDP training did not converge");
  return absl::OkStatus();
}

}  // namespace

int main() {
  absl::Status status = ddp::Spawn(TrainOneRank, 2);
  if (!status.ok()) {
    std::fprintf(stderr, "two_rank_ddp: %s\n", status.ToString().c_str());
    return 1;
  }
  std::printf("two_rank_ddp: ok\n");
  return 0;
}
