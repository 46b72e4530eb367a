// The smallest complete DDP program, to read side by side with the usual PyTorch DDP script:
//
//   dist.init_process_group("gloo")                 ->  InitProcessGroup({})
//   model = DDP(Net())                              ->  DistributedDataParallel::Create(model, group)
//   sampler = DistributedSampler(train)             ->  every world_size-th sample from rank
//   for x, y in loader: loss = F.cross_entropy(model(x), y); loss.backward(); opt.step()
//   if rank == 0: torch.save(model.state_dict(), "/tmp/minimal_ddp.pt"); dist.barrier()
//   accuracy: all_reduce(correct), all_reduce(count)
//
// Run: bazel-bin/launch/ddprun --nproc_per_node=2 bazel-bin/examples/minimal_ddp
//  or: bazel-bin/examples/minimal_ddp --nprocs=2          (no launcher: Spawn, as mp.spawn)
//  or: mpirun -np 2 bazel-bin/examples/minimal_ddp         (or srun)
#include <cstdio>
#include <numeric>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "comm/init.h"
#include "data/fashion_mnist.h"
#include "ddp/distributed_data_parallel.h"
#include "launch/spawn.h"
#include "nn/models.h"
#include "nn/weights_file.h"
#include "nn/sgd.h"
#include "tensor/autograd.h"
#include "tensor/ops.h"

ABSL_FLAG(int, nprocs, 0,
          "Start this many ranks of this program itself (Spawn, as torch.multiprocessing.spawn); 0: the "
          "ranks were started by a launcher (ddprun, mpirun, srun).");

namespace {

// Exits with the message when `status` is an error (a real program would handle it).
void OrDie(const absl::Status& status) {
  if (status.ok()) return;
  std::fprintf(stderr, "minimal_ddp: %s\n", status.ToString().c_str());
  std::exit(1);
}

// Indices rank, rank + world, rank + 2 * world, ... of [0, size).
std::vector<int64_t> Strided(int64_t size, int rank, int world) {
  std::vector<int64_t> out;
  for (int64_t i = rank; i < size; i += world) out.push_back(i);
  return out;
}

}  // namespace

namespace ddp {

void Evaluate(Module& model, ProcessGroup& group);

// One epoch of DDP training on this rank's shard, then the evaluation. Exits the process on an error.
void Train() {
  // 1. Join the group described by RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (set by ddprun).
  auto dist = InitProcessGroup(InitOptions{});
  OrDie(dist.status());
  ProcessGroup& group = *(*dist)->group;
  const int rank = group.rank(), world = group.size();

  // 2. The same model on every rank (DDP broadcasts rank 0's weights anyway), wrapped in DDP.
  Generator generator(0);
  std::shared_ptr<Module> model = *MakeModel("mlp", generator);
  auto ddp_model = DistributedDataParallel::Create(model, &group);
  OrDie(ddp_model.status());
  SgdOptions sgd;
  sgd.lr = 0.01f;
  sgd.momentum = 0.9f;
  Sgd optimizer(model->Parameters(), sgd);

  // 3. This rank's shard of the training set; one epoch of batches of 64.
  auto train = LoadFashionMnist(kDefaultFashionMnistDir, Split::kTrain);
  OrDie(train.status());
  const std::vector<int64_t> shard = Strided((*train)->Size() / world * world, rank, world);  // equal counts
  for (size_t begin = 0; begin + 64 <= shard.size(); begin += 64) {
    Example batch = *(*train)->GetBatch({shard.begin() + begin, shard.begin() + begin + 64});
    model->ZeroGrad();
    Tensor loss = CrossEntropy((*ddp_model)->Forward(batch.input), batch.target);
    loss.Backward();  // gradients are averaged across ranks during this call
    OrDie((*ddp_model)->status());
    optimizer.Step();
    if (rank == 0 && begin % (64 * 200) == 0) std::printf("step %zu loss %.4f\n", begin / 64, loss.item());
  }

  // 4. Rank 0 saves a checkpoint; the others wait until it is written.
  if (rank == 0) OrDie(SaveModuleWeights(*model, "/tmp/minimal_ddp.pt"));  // torch.save's format
  OrDie(group.Barrier()->Wait(group.timeout()));
  Evaluate(*model, group);
}

// 5. Distributed accuracy: each rank scores its share of the test set, then sum (correct, count).
void Evaluate(Module& model, ProcessGroup& group) {
  const int rank = group.rank(), world = group.size();
  auto test = LoadFashionMnist(kDefaultFashionMnistDir, Split::kTest);
  OrDie(test.status());
  model.Eval();
  NoGradGuard no_grad;
  const std::vector<int64_t> mine = Strided((*test)->Size(), rank, world);
  Example batch = *(*test)->GetBatch(mine);
  std::vector<int64_t> predicted = Argmax(model.Forward(batch.input), 1).ToVector<int64_t>();
  std::vector<int64_t> labels = batch.target.ToVector<int64_t>();
  Tensor totals = Tensor::Empty({2}, DType::kInt64);
  totals.data<int64_t>()[0] = 0;
  for (size_t i = 0; i < labels.size(); ++i) totals.data<int64_t>()[0] += predicted[i] == labels[i];
  totals.data<int64_t>()[1] = static_cast<int64_t>(labels.size());
  OrDie(group.AllReduce(totals)->Wait(group.timeout()));
  if (rank == 0) {
    std::printf("test accuracy %.4f over %ld samples on %d ranks\n",
                static_cast<double>(totals.data<int64_t>()[0]) / totals.data<int64_t>()[1],
                static_cast<long>(totals.data<int64_t>()[1]), world);
  }
}

}  // namespace ddp

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int nprocs = absl::GetFlag(FLAGS_nprocs);
  if (nprocs <= 0) {
    ddp::Train();  // started by a launcher, which set RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    return 0;
  }
  // mp.spawn(train, nprocs=N): each rank is this program run again with RANK etc. set; in those
  // processes Spawn runs the function and exits, here it waits for all of them.
  OrDie(ddp::Spawn([](int) { ddp::Train(); return absl::OkStatus(); }, nprocs));
  return 0;
}
