// Distributed evaluation equals single-process evaluation, ranks as threads over Gloo.
#include "ddp/distributed_eval.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <thread>

#include "comm/gloo/process_group_gloo.h"
#include "data/tensor_dataset.h"
#include "nn/models.h"
#include "store/memory_store.h"
#include "tensor/autograd.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

void RunRanks(int world, const std::function<void(int, ProcessGroup&)>& fn) {
  MemoryStore store;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      auto group = ProcessGroupGloo::Create(store, rank, world);
      ASSERT_TRUE(group.ok()) << group.status();
      fn(rank, **group);
    });
  }
  for (auto& t : threads) t.join();
}

// 1003 random images with random labels (an odd size, so ranks get different counts).
std::shared_ptr<TensorDataset> RandomImages(int64_t n = 1003) {
  Generator g(17);
  std::vector<int64_t> labels(n);
  for (auto& l : labels) l = static_cast<int64_t>(g.RandomIndex(10));
  return std::make_shared<TensorDataset>(Normal({n, 1, 28, 28}, 0.0f, 1.0f, g), FromVector(labels, {n}));
}

std::shared_ptr<Module> Model(const std::string& name) {
  Generator g(42);
  return *MakeModel(name, g);
}

// The reference: one forward over the whole dataset with the library's own CrossEntropy and Argmax.
EvalResult Reference(Module& model, const TensorDataset& data) {
  model.Eval();
  NoGradGuard no_grad;
  Tensor logits = model.Forward(data.inputs());
  EvalResult result;
  result.count = data.Size();
  result.loss = CrossEntropy(logits, data.targets()).item();
  std::vector<int64_t> predicted = Argmax(logits, 1).ToVector<int64_t>(), labels = data.targets().ToVector<int64_t>();
  int64_t correct = 0;
  for (size_t i = 0; i < labels.size(); ++i) correct += predicted[i] == labels[i];
  result.accuracy = static_cast<double>(correct) / result.count;
  // Top-5 as torch.topk(logits, 5) would count it: the label among the five largest of its row.
  const std::vector<float> rows = Contiguous(logits).ToVector<float>();
  const int64_t classes = logits.size(1);
  int64_t top5 = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    std::vector<float> row(rows.begin() + i * classes, rows.begin() + (i + 1) * classes);
    const float label_logit = row[labels[i]];
    std::nth_element(row.begin(), row.begin() + 4, row.end(), std::greater<float>());
    top5 += label_logit >= row[4];
  }
  result.top5_accuracy = static_cast<double>(top5) / result.count;
  model.Train();
  return result;
}

TEST(DistributedEvalTest, SingleProcessMatchesAPlainForward) {
  auto data = RandomImages();
  auto model = Model("mlp");
  const EvalResult want = Reference(*model, *data);
  DistributedEvalOptions options;
  options.batch_size = 100;
  auto got = EvaluateDistributed(*model, *data, nullptr, options);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->count, 1003);
  EXPECT_DOUBLE_EQ(got->accuracy, want.accuracy);
  EXPECT_DOUBLE_EQ(got->top5_accuracy, want.top5_accuracy);
  EXPECT_GT(want.top5_accuracy, want.accuracy);  // random labels: about 0.5 against 0.1
  EXPECT_NEAR(got->loss, want.loss, 1e-5 * want.loss);
  EXPECT_TRUE(model->is_training());  // mode restored
}

TEST(DistributedEvalTest, EveryWorldSizeEqualsOneProcess) {
  struct Case {
    std::string model;
    int64_t size;
    std::vector<int> worlds;
  };
  for (const Case& c : {Case{"mlp", 1003, {2, 3, 4}}, Case{"cnn_bn", 203, {2, 3}}}) {
    const std::string& name = c.model;
    auto data = RandomImages(c.size);
    auto reference_model = Model(name);
    DistributedEvalOptions options;
    options.batch_size = 64;
    const EvalResult want = *EvaluateDistributed(*reference_model, *data, nullptr, options);
    auto single = GatherPredictions(*reference_model, *data, nullptr, options);
    ASSERT_TRUE(single.ok()) << single.status();
    for (int world : c.worlds) {
      SCOPED_TRACE(testing::Message() << name << " world " << world);
      RunRanks(world, [&](int rank, ProcessGroup& group) {
        auto model = Model(name);
        // Rank-local drift of BatchNorm statistics must not matter: rank 0's buffers are broadcast.
        if (rank != 0) {
          for (const Tensor& buffer : model->Buffers()) {
            if (buffer.dtype() == DType::kFloat32) buffer.data<float>()[0] += 5.0f;
          }
        }
        DistributedEvalOptions mine = options;
        mine.num_workers = rank % 2;
        auto got = EvaluateDistributed(*model, *data, &group, mine);
        ASSERT_TRUE(got.ok()) << got.status();
        EXPECT_EQ(got->count, want.count);
        EXPECT_DOUBLE_EQ(got->accuracy, want.accuracy);
        EXPECT_DOUBLE_EQ(got->top5_accuracy, want.top5_accuracy);
        EXPECT_NEAR(got->loss, want.loss, 1e-7);  // float32 logits vary in the last bit with the batch
        auto gathered = GatherPredictions(*model, *data, &group, mine);
        ASSERT_TRUE(gathered.ok()) << gathered.status();
        EXPECT_EQ(gathered->predicted, single->predicted);
        EXPECT_EQ(gathered->in_top5, single->in_top5);
        EXPECT_DOUBLE_EQ(gathered->result.accuracy, want.accuracy);
        EXPECT_DOUBLE_EQ(gathered->result.top5_accuracy, want.top5_accuracy);
        EXPECT_NEAR(gathered->result.loss, single->result.loss, 1e-7);
        for (size_t i = 0; i < gathered->loss.size(); ++i) ASSERT_NEAR(gathered->loss[i], single->loss[i], 1e-6);
      });
    }
  }
}

TEST(DistributedEvalTest, DatasetErrorsReachTheCaller) {
  auto data = RandomImages(10);
  auto model = Model("mlp");
  DistributedEvalOptions options;
  options.batch_size = 0;
  EXPECT_NE(EvaluateDistributed(*model, *data, nullptr, options).status().message().find("batch_size"),
            std::string::npos);
}

}  // namespace
}  // namespace ddp
