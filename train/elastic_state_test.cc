// The state an elastic regroup hands over (train/elastic_state.h): parameters, buffers, the optimizer's
// momentum and step count, the step and the sampler position arrive exactly; a message that does not fit
// the receiver is refused by name and changes nothing.
#include "train/elastic_state.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "nn/models.h"
#include "nn/sgd.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "tensor/random.h"

namespace ddp {
namespace {

// A cnn_bn (it has buffers) and an SGD with momentum after one step on random data.
struct Trained {
  std::shared_ptr<Module> model;
  std::unique_ptr<Sgd> optimizer;
};

Trained Make(uint64_t seed, bool step) {
  Generator generator(seed);
  Trained t;
  t.model = *MakeModel("cnn_bn", generator);
  SgdOptions options;
  options.momentum = 0.9f;
  t.optimizer = std::make_unique<Sgd>(t.model->Parameters(), options);
  if (step) {
    const Tensor x = Normal({4, 1, 28, 28}, 0.0f, 1.0f, generator);
    Tensor loss = Sum(t.model->Forward(x));
    loss.Backward();
    t.optimizer->Step();
  }
  return t;
}

TEST(ElasticStateTest, TheReceiverEndsWithTheSendersStateExactly) {
  Trained sender = Make(1, /*step=*/true);
  ElasticTrainingState sent{sender.model.get(), sender.optimizer.get(), 42, SamplerState{7, 3, 1280}, "3,2;1,0"};
  const absl::StatusOr<std::string> bytes = EncodeElasticState(sent);
  ASSERT_TRUE(bytes.ok()) << bytes.status();

  Trained receiver = Make(2, /*step=*/false);  // other weights, no momentum yet
  ElasticTrainingState received{receiver.model.get(), receiver.optimizer.get(), 0, SamplerState{}};
  ASSERT_TRUE(DecodeElasticState(*bytes, "rank 0", received).ok());
  EXPECT_EQ(received.global_step, 42);
  EXPECT_EQ(received.position, (SamplerState{7, 3, 1280}));
  EXPECT_EQ(received.bucket_order, "3,2;1,0");  // carried as text, whatever DDP's format
  const NamedTensors a = sender.model->StateDict(), b = receiver.model->StateDict();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    ASSERT_EQ(a[i].second.nbytes(), b[i].second.nbytes());
    EXPECT_EQ(0, std::memcmp(a[i].second.raw_data(), b[i].second.raw_data(), a[i].second.nbytes())) << a[i].first;
  }
  const OptimizerState sa = sender.optimizer->StateDict(), sb = receiver.optimizer->StateDict();
  EXPECT_EQ(sa.step_count, sb.step_count);
  ASSERT_EQ(sa.tensors.size(), sb.tensors.size());
  ASSERT_FALSE(sa.tensors.empty());
  for (size_t i = 0; i < sa.tensors.size(); ++i) {
    EXPECT_EQ(sa.tensors[i].first, sb.tensors[i].first);
    EXPECT_EQ(0, std::memcmp(sa.tensors[i].second.raw_data(), sb.tensors[i].second.raw_data(),
                             sa.tensors[i].second.nbytes()))
        << sa.tensors[i].first;
  }
}

TEST(ElasticStateTest, AMessageForAnotherModelIsRefusedAndChangesNothing) {
  Generator generator(3);
  std::shared_ptr<Module> mlp = *MakeModel("mlp", generator);
  Sgd mlp_optimizer(mlp->Parameters(), SgdOptions{});
  ElasticTrainingState sent{mlp.get(), &mlp_optimizer, 5, SamplerState{}};
  const absl::StatusOr<std::string> bytes = EncodeElasticState(sent);
  ASSERT_TRUE(bytes.ok()) << bytes.status();

  Trained receiver = Make(4, /*step=*/false);
  std::vector<std::string> before;  // copies: StateDict shares the module's data
  for (const auto& [name, tensor] : receiver.model->StateDict()) {
    before.emplace_back(static_cast<const char*>(tensor.raw_data()), tensor.nbytes());
  }
  ElasticTrainingState received{receiver.model.get(), receiver.optimizer.get(), 9, SamplerState{}};
  const absl::Status status = DecodeElasticState(*bytes, "rank 1", received);
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(received.global_step, 9);
  const NamedTensors after = receiver.model->StateDict();
  ASSERT_EQ(before.size(), after.size());
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(before[i], std::string(static_cast<const char*>(after[i].second.raw_data()), after[i].second.nbytes()))
        << after[i].first;
  }
  EXPECT_FALSE(DecodeElasticState("not safetensors", "rank 1", received).ok());
}

}  // namespace
}  // namespace ddp
