// SyncBatchNorm2d when its collective fails: the failure is a status naming the stage, never an abort,
// and the layer stops communicating (a rank out of step must not wait for the timeout again and again).
#include "ddp/sync_batch_norm.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "comm/async_work.h"
#include "nn/layers.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "tensor/random.h"

namespace ddp {
namespace {

// A group of two whose peer never answers: all-reduces before `fail_from` succeed as if the peer had
// contributed zeros, the others fail with "lost rank 1". Counts the all-reduces issued.
class PeerLostGroup : public ProcessGroup {
 public:
  explicit PeerLostGroup(int fail_from) : fail_from_(fail_from) {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string backend_name() const override { return "fake"; }
  absl::Duration timeout() const override { return absl::Seconds(1); }
  std::shared_ptr<Work> AllReduce(const Tensor&, ReduceOp) override {
    auto work = std::make_shared<AsyncWork>("AllReduce");
    work->Complete(all_reduces_++ < fail_from_ ? absl::OkStatus() : absl::UnavailableError("lost rank 1"));
    return work;
  }
  std::shared_ptr<Work> Broadcast(const Tensor&, int) override { return Unsupported(); }
  std::shared_ptr<Work> AllGather(const std::vector<Tensor>&, const Tensor&) override {
    return Unsupported();
  }
  std::shared_ptr<Work> ReduceScatter(const Tensor&, const std::vector<Tensor>&, ReduceOp) override {
    return Unsupported();
  }
  std::shared_ptr<Work> Reduce(const Tensor&, int, ReduceOp) override { return Unsupported(); }
  std::shared_ptr<Work> Barrier() override { return Unsupported(); }
  int all_reduces() const { return all_reduces_; }

 private:
  static std::shared_ptr<Work> Unsupported() {
    auto work = std::make_shared<AsyncWork>("unsupported");
    work->Complete(absl::UnimplementedError("not used by SyncBatchNorm2d"));
    return work;
  }
  const int fail_from_;
  int all_reduces_ = 0;
};

// A SyncBatchNorm2d of 3 channels over `group`, and a batch for it that requires a gradient.
struct Layer {
  std::shared_ptr<SyncBatchNorm2d> bn;
  Tensor x;
};
Layer MakeLayer(ProcessGroup* group) {
  Generator generator(7);
  nn::BatchNorm2d plain(3);
  Layer layer{std::make_shared<SyncBatchNorm2d>(plain, group), Uniform({4, 3, 5, 5}, -1, 1, generator)};
  layer.x.set_requires_grad(true);
  layer.bn->Train(true);
  return layer;
}

// The statistics' all-reduce fails: forward returns, the status names the stage, and neither the rest of
// the forward nor the backward nor the next forward communicates again.
TEST(SyncBatchNormTest, AFailedForwardCollectiveIsAStatusAndTheLayerStopsCommunicating) {
  PeerLostGroup group(/*fail_from=*/0);
  Layer layer = MakeLayer(&group);
  EXPECT_TRUE(layer.bn->status().ok());
  Tensor y = layer.bn->Forward(layer.x);
  EXPECT_EQ(y.shape(), layer.x.shape());
  const absl::Status status = layer.bn->status();
  EXPECT_TRUE(absl::IsUnavailable(status)) << status;
  EXPECT_EQ(status.message(), "SyncBatchNorm2d statistics: lost rank 1");
  Sum(y).Backward();
  layer.bn->Forward(layer.x);
  EXPECT_EQ(group.all_reduces(), 1);
  EXPECT_EQ(layer.bn->status(), status);  // the first failure is kept
}

// The backward's all-reduce fails (the forward's two succeeded): the status names the backward; a model
// holding the layer reports it through SyncBatchNormStatus.
TEST(SyncBatchNormTest, AFailedBackwardCollectiveIsReportedForTheWholeModel) {
  PeerLostGroup group(/*fail_from=*/2);
  Layer layer = MakeLayer(&group);
  nn::Sequential model({{"bn", std::shared_ptr<Module>(layer.bn)}});
  Tensor y = model.Forward(layer.x);
  EXPECT_TRUE(SyncBatchNormStatus(model).ok());
  Sum(y).Backward();
  const absl::Status status = SyncBatchNormStatus(model);
  EXPECT_EQ(status.message(), "SyncBatchNorm2d backward: lost rank 1");
  EXPECT_EQ(group.all_reduces(), 3);
}

}  // namespace
}  // namespace ddp
