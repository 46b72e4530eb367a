// A communication hook of your own: how DDP reduces each bucket of gradients (reducer/comm_hook.h). This
// one compresses the bucket to bfloat16, all-reduces that (half the bytes on the wire), copies the result
// back into the float32 bucket as the all-reduce completes, and counts what it sent. It is registered
// with RegisterCommHook before the first forward; the built-in hooks (MakeCommHook: "fp16", "bf16",
// "powersgd") are registered the same way. The PyTorch twin:
//
//   def counting_bf16_hook(state, bucket):
//       compressed = bucket.buffer().to(torch.bfloat16).div_(world_size)
//       state["sent"] += compressed.nelement() * compressed.element_size()
//       fut = dist.all_reduce(compressed, async_op=True).get_future()
//       return fut.then(lambda f: bucket.buffer().copy_(f.value()[0]))
//   model = DDP(net, bucket_cap_mb=0.25); model.register_comm_hook({"sent": 0}, counting_bf16_hook)
//
// Unlike PyTorch's bucket.buffer(), GradBucket::buffer here is already divided by the world size, so the
// hook only sums. Run: bazel-bin/launch/ddprun --nproc_per_node=2 bazel-bin/examples/comm_hook
// Prints the loss every 50 steps on rank 0 and a last line with the bytes sent per step, the final loss
// and whether every rank ended with the same parameters.
#include "reducer/comm_hook.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "comm/init.h"
#include "data/fashion_mnist.h"
#include "ddp/distributed_data_parallel.h"
#include "nn/models.h"
#include "nn/sgd.h"
#include "tensor/autograd.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

constexpr int kSteps = 100;  // per rank, batches of 64

// Exits with the message when `status` is an error (a real program would handle it).
void OrDie(const absl::Status& status) {
  if (status.ok()) return;
  std::fprintf(stderr, "comm_hook: %s\n", status.ToString().c_str());
  std::exit(1);
}

// The hook. RunHook runs on the training thread as each bucket fills during backward; it must not
// block, so it starts the all-reduce and returns a Work that completes once `bucket.buffer` holds the
// average. ThenWork chains the decompression onto the all-reduce: it runs on the thread that completes
// the collective. The counters are touched only by RunHook (the training thread).
class CountingBf16Hook : public CommHook {
 public:
  std::shared_ptr<Work> RunHook(ProcessGroup& group, GradBucket& bucket) override {
    Tensor buffer = bucket.buffer;  // float32, contiguous; a Tensor handle shares its data
    Tensor compressed = ToDType(buffer, DType::kBFloat16);
    bucket.bytes_sent = static_cast<int64_t>(compressed.nbytes());  // what DDP's statistics report
    bytes_sent_ += compressed.nbytes();
    bytes_float32_ += buffer.nbytes();
    ++buckets_;
    if (bucket.is_last) ++steps_;  // one iteration ends with its last bucket
    return ThenWork("counting_bf16 bucket", group.AllReduce(compressed, ReduceOp::kSum),
                    {[compressed, buffer]() -> absl::StatusOr<std::shared_ptr<Work>> {
                      CopyInPlace(buffer, compressed);  // bfloat16 -> float32, into the bucket
                      return std::shared_ptr<Work>();   // nothing more to wait for
                    }});
  }
  // Every rank must register a hook of the same name (DDP checks it).
  std::string name() const override { return "counting_bf16"; }

  int64_t steps() const { return steps_; }
  int64_t buckets() const { return buckets_; }
  size_t bytes_sent() const { return bytes_sent_; }
  size_t bytes_float32() const { return bytes_float32_; }

 private:
  int64_t steps_ = 0, buckets_ = 0;
  size_t bytes_sent_ = 0, bytes_float32_ = 0;
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

// kSteps steps on samples rank, rank + world, ... of the training set; returns this rank's last loss.
float TrainSteps(DistributedDataParallel& ddp_model, int rank, int world) {
  auto train = LoadFashionMnist(kDefaultFashionMnistDir, Split::kTrain);
  OrDie(train.status());
  SgdOptions sgd;
  sgd.lr = 0.05f;
  sgd.momentum = 0.9f;
  Sgd optimizer(ddp_model.module().Parameters(), sgd);
  float loss_value = 0;
  for (int step = 0; step < kSteps; ++step) {
    std::vector<int64_t> indices;
    for (int64_t i = 0; i < 64; ++i) indices.push_back((step * 64 + i) * world + rank);
    Example batch = *(*train)->GetBatch(indices);
    ddp_model.module().ZeroGrad();
    Tensor loss = CrossEntropy(ddp_model.Forward(batch.input), batch.target);
    loss.Backward();  // each full bucket goes through CountingBf16Hook::RunHook
    OrDie(ddp_model.status());
    optimizer.Step();
    loss_value = static_cast<float>(loss.item());
    if (rank == 0 && step % 50 == 0) std::printf("step %d loss %.4f\n", step, loss_value);
  }
  return loss_value;
}

void Train() {
  auto dist = InitProcessGroup(InitOptions{});
  OrDie(dist.status());
  ProcessGroup& group = *(*dist)->group;
  Generator generator(0);
  std::shared_ptr<Module> model = *MakeModel("mlp", generator);
  DdpOptions options;
  options.reducer.caps.first_bucket_cap_bytes = size_t{256} << 10;  // small buckets: the mlp's
  options.reducer.caps.bucket_cap_bytes = size_t{256} << 10;        // gradients fill 2, 2 hook calls a step
  auto ddp_model = DistributedDataParallel::Create(model, &group, options);
  OrDie(ddp_model.status());
  auto hook = std::make_shared<CountingBf16Hook>();  // DDP shares it; we keep a handle for the counters
  OrDie((*ddp_model)->RegisterCommHook(hook));
  const float loss = TrainSteps(**ddp_model, group.rank(), group.size());
  const float diff = MaxDifferenceFromRankZero(*model, group);
  if (group.rank() == 0) {
    std::printf(
        "comm_hook: %ld steps on %d ranks, %ld buckets per step, %.2f MB sent per step in bfloat16 "
        "(%.2f MB in float32), final loss %.4f, max parameter difference across ranks %g (%s)\n",
        static_cast<long>(hook->steps()), group.size(), static_cast<long>(hook->buckets() / hook->steps()),
        hook->bytes_sent() / 1e6 / hook->steps(), hook->bytes_float32() / 1e6 / hook->steps(), loss, diff,
        diff == 0 ? "ranks agree" : "RANKS DIFFER");
  }
  if (diff != 0 || hook->steps() != kSteps) std::exit(1);
}

}  // namespace
}  // namespace ddp

int main() {
  ddp::Train();
  return 0;
}
