// The pieces behind "what must agree is checked" and "numbers that cannot train are errors", in one
// process: the flags the ranks compare, the comparison of what each rank loaded, and a non-finite loss
// that only one rank sees stopping every rank of the real step loop (ranks as threads over Gloo).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "tensor/factory.h"
#include "tensor/random.h"
#include "testing/run_ranks.h"
#include "train/batch_source.h"
#include "train/finite_checks.h"
#include "train/settings_agreement.h"
#include "train/setup.h"
#include "train/state_agreement.h"
#include "train/train_step.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;

// The value SettingsToAgree gives `name`, or "(absent)".
std::string Agreed(const TrainConfig& config, const std::string& name) {
  for (const AgreedField& field : SettingsToAgree(config)) {
    if (field.name == name) return field.value;
  }
  return "(absent)";
}

// --eval_only comes first (a rank that evaluates and one that trains compare different lists after it);
// output flags compare whether they are given, not their paths; per-rank tuning is not compared.
TEST(SettingsToAgreeTest, NamesWhatMustMatchAndOnlyThat) {
  TrainConfig config;
  EXPECT_EQ(SettingsToAgree(config).front().name, "--eval_only");
  EXPECT_EQ(Agreed(config, "--sync_bn"), "false");
  EXPECT_EQ(Agreed(config, "--zero"), "false");
  EXPECT_EQ(Agreed(config, "--save"), "not given");
  config.save = "/node1/w.safetensors";
  config.sync_bn = true;
  EXPECT_EQ(Agreed(config, "--save"), "given");
  EXPECT_EQ(Agreed(config, "--sync_bn"), "true");
  for (const std::string name :
       {"--data_dir", "--threads", "--num_workers", "--eval_batch_size", "--backend"}) {
    EXPECT_EQ(Agreed(config, name), "(absent)") << name;
  }
  // Numbers compare exactly, however they were written.
  config.lr = 0.01;
  config.bucket_cap_mb = "25.0";
  EXPECT_EQ(Agreed(config, "--lr"), "0.01");
  EXPECT_EQ(Agreed(config, "--bucket_cap_mb"), "25");
  config.lr = 0.0100000001;
  EXPECT_EQ(Agreed(config, "--lr"), "0.0100000001");
  config.eval_only = true;
  EXPECT_EQ(Agreed(config, "--lr"), "(absent)") << "training flags do not matter to an evaluation";
  EXPECT_EQ(Agreed(config, "--init_from"), "not given");
  EXPECT_EQ(Agreed(config, "--model"), "cnn");
  EXPECT_EQ(Agreed(config, "--dataset"), "fashion_mnist") << "the models are built for the data set";
  config.eval_only = false;
  config.random_flip = true;
  EXPECT_EQ(Agreed(config, "--random_flip"), "true");
  EXPECT_EQ(Agreed(config, "--random_crop_padding"), "0");
}

// Ranks whose keys differ get, on every rank, one message with each distinct key's first rank's detail.
TEST(CheckRanksHoldTheSameTest, NamesEachGroupOfRanksWithItsDetail) {
  std::vector<std::string> errors(3);
  RunRanks(3, [&](int rank, ProcessGroup& group) {
    const std::string key = rank == 1 ? "b" : "a";
    errors[rank] =
        CheckRanksHoldTheSame(group, "what", key, "detail of rank " + std::to_string(rank)).ToString();
  });
  for (const std::string& error : errors) {
    EXPECT_EQ(error, "FAILED_PRECONDITION: what: ranks 0, 2: detail of rank 0; rank 1: detail of rank 1");
  }
  RunRanks(2, [&](int rank, ProcessGroup& group) {
    EXPECT_TRUE(CheckRanksHoldTheSame(group, "what", "same", "path of rank " + std::to_string(rank)).ok());
  });
}

// Equal modules give equal fingerprints; one changed element changes it.
TEST(ModuleStateFingerprintTest, FollowsEveryElement) {
  TrainConfig config;
  config.model = "mlp";
  auto a = BuildModel(config, Device::CPU());
  auto b = BuildModel(config, Device::CPU());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(ModuleStateFingerprint(**a), ModuleStateFingerprint(**b));
  (*b)->Parameters().back().data<float>()[3] += 1e-6f;
  EXPECT_NE(ModuleStateFingerprint(**a), ModuleStateFingerprint(**b));
}

// The watch keeps the first non-finite loss and the last finite one before it, travels as text, and
// names the likely cause: the learning rate after an update, the starting weights at the first step.
TEST(LossWatchTest, KeepsTheFirstNonFiniteLossAndNamesTheCause) {
  TrainConfig config;
  config.lr = 1e30;
  LossWatch watch(/*start_step=*/10);
  watch.Observe(11, 2.5, 1);
  EXPECT_FALSE(watch.tripped());
  watch.Observe(12, std::numeric_limits<double>::infinity(), 1);
  watch.Observe(13, std::nan(""), 1);
  ASSERT_TRUE(watch.tripped());
  EXPECT_EQ(watch.bad_step(), 12);
  const std::string expected =
      "the training loss is inf at step 12 (rank 1), so training stopped on every rank: the learning rate is "
      "likely "
      "too high (--lr=1e+30; the loss was 2.5000 at step 11): lower it, or add --warmup_steps or "
      "--clip_grad_norm";
  EXPECT_EQ(watch.Error(config, 2).message(), expected);
  LossWatch back(0);
  ASSERT_TRUE(LossWatch::Decode(watch.Encode(), &back).ok());
  EXPECT_EQ(back.Error(config, 2).message(), expected);
  EXPECT_TRUE(absl::IsDataLoss(LossWatch::Decode("12 nan", &back)));

  LossWatch first(/*start_step=*/0);
  first.Observe(1, std::nan(""), 0);
  config.init_from = "/w.safetensors";
  EXPECT_EQ(first.Error(config, 1).message(),
            "the training loss is nan at step 1, so training stopped: it is this run's first step, before "
            "any update, "
            "so the weights it started from (--init_from=/w.safetensors, finite) overflow on this data");
}

// A model with a NaN is found by name; finite weights pass.
TEST(FiniteWeightsTest, NameTheFirstNonFiniteTensor) {
  TrainConfig config;
  config.model = "mlp";
  auto model = BuildModel(config, Device::CPU());
  ASSERT_TRUE(model.ok());
  EXPECT_TRUE(RequireFiniteWeights(**model, "saving").ok());
  const auto named = (*model)->NamedParameters();
  named[1].second.data<float>()[0] = std::nanf("");
  EXPECT_EQ(RequireFiniteWeights(**model, "saving").message(),
            "saving: the weights hold NaN or infinity (" + named[1].first + ")");
}

// Random batches of the mlp's images. When step `bad_step` (1-based) takes its batch, `poisoned` (a bias
// of the last layer; null: none) gets a NaN, so that this rank's loss of that step is NaN (a NaN input
// would not do: ReLU turns NaN into 0).
class Batches : public BatchSource {
 public:
  Batches(Tensor poisoned, int bad_step) : poisoned_(std::move(poisoned)), bad_step_(bad_step) {}
  absl::StatusOr<std::optional<Example>> Next() override {
    ++taken_;
    if (poisoned_.defined() && taken_ == bad_step_) poisoned_.data<float>()[0] = std::nanf("");
    Example batch;
    batch.input = Uniform({8, 1, 28, 28}, 0, 1, generator_);
    batch.target = FromVector(std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}, {8});
    return batch;
  }
  int taken() const { return taken_; }

 private:
  const Tensor poisoned_;
  const int bad_step_;
  Generator generator_{5};
  int taken_ = 0;
};

// Only rank 1 sees a NaN loss (at step 3): every rank stops within a step, none waits
// for another, and all fail with the same error naming step 3 and rank 1, with Join and without.
TEST(NonFiniteLossTest, OneRanksNanStopsEveryRankWithTheSameError) {
  for (const bool join : {true, false}) {
    TrainConfig config;
    config.model = "mlp";
    config.join = join;
    config.lr_schedule = "constant";
    std::vector<std::string> errors(2);
    std::vector<int> taken(2);
    RunRanks(2, [&](int rank, ProcessGroup& group) {
      auto model = BuildModel(config, Device::CPU());
      ASSERT_TRUE(model.ok()) << model.status();
      auto options = DdpOptionsFor(config);
      ASSERT_TRUE(options.ok()) << options.status();
      auto ddp = WrapDdp(config, *model, Device::CPU(), &group, *options);
      ASSERT_TRUE(ddp.ok()) << ddp.status();
      auto optimizer = MakeOptimizer(config, (*model)->Parameters());
      ASSERT_TRUE(optimizer.ok()) << optimizer.status();
      TrainState state{config, **model, ddp->get(), **optimizer, rank, 2};
      state.group = &group;
      state.total_steps = 20;
      state.loop.progress = nullptr;
      Batches batches(rank == 1 ? (*model)->Parameters().back() : Tensor(), /*bad_step=*/3);
      errors[rank] = RunSteps(state, 1, batches, 20).status().ToString();
      taken[rank] = batches.taken();
    });
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_THAT(errors[rank],
                  HasSubstr("FAILED_PRECONDITION: the training loss is nan at step 3 (rank 1), so "
                            "training stopped on every rank"))
          << "--join=" << join << " rank " << rank;
      EXPECT_EQ(taken[rank], 4) << "stopped after the step whose exchange carried the request: rank " << rank;
    }
  }
}

}  // namespace
}  // namespace ddp
