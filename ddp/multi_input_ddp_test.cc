// DDP around a model with two inputs and two outputs (logits and an auxiliary head), against one process
// on the concatenated batch: plain, with find_unused_parameters while the auxiliary head is left out on
// some steps (not computed, or computed and left out of the loss, on every rank or on some), under no_sync
// accumulation, and through comm hooks. Ranks are threads over Gloo.
#include <gtest/gtest.h>

#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "ddp/distributed_data_parallel.h"
#include "nn/layers.h"
#include "nn/models.h"
#include "nn/sgd.h"
#include "reducer/comm_hook.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "testing/run_ranks.h"
#include "testing/tensor_agreement.h"

namespace ddp {
namespace {

constexpr int kWorld = 2;
constexpr int64_t kPerRank = 3;
constexpr float kAuxWeight = 0.5f;

// image [n, 12] and side [n, 4] -> {"logits" [n, 5], "aux" [n, 3]}; "aux" is undefined when the
// auxiliary head is switched off (a setting that is not a tensor: a member, set before the call).
class TwoInputNet : public Module {
 public:
  explicit TwoInputNet(Generator& g) : Module("TwoInputNet") {
    RegisterModule("image", std::make_shared<nn::Linear>(12, 16, g));
    RegisterModule("side", std::make_shared<nn::Linear>(4, 16, g));
    RegisterModule("head", std::make_shared<nn::Linear>(16, 5, g));
    RegisterModule("aux", std::make_shared<nn::Linear>(16, 3, g));
  }
  TensorList ForwardMany(const TensorList& inputs) override {
    const std::vector<Tensor> in = BindInputs(inputs, {"image", "side"});
    const Tensor h = Relu((*Child("image"))(in[0]) + (*Child("side"))(in[1]));
    return {{"logits", (*Child("head"))(h)}, {"aux", compute_aux_ ? (*Child("aux"))(h) : Tensor()}};
  }
  void set_compute_aux(bool on) { compute_aux_ = on; }
  std::shared_ptr<Module> Replicate() const override { return ReplicateAs(*this); }

 private:
  bool compute_aux_ = true;
};

std::shared_ptr<TwoInputNet> MakeNet() {
  Generator g(11);
  return std::make_shared<TwoInputNet>(g);
}

// One global batch; rank r owns rows [r * kPerRank, (r + 1) * kPerRank).
struct Batch {
  Tensor image, side, label, coarse;
};
Batch GlobalBatch(int step, int64_t rows) {
  Generator g(900 + step);
  std::vector<int64_t> label(rows), coarse(rows);
  for (auto& l : label) l = static_cast<int64_t>(g.RandomIndex(5));
  for (auto& c : coarse) c = static_cast<int64_t>(g.RandomIndex(3));
  return {Normal({rows, 12}, 0.0f, 1.0f, g), Normal({rows, 4}, 0.0f, 1.0f, g), FromVector(label, {rows}),
          FromVector(coarse, {rows})};
}
Tensor Rows(const Tensor& t, int64_t first, int64_t count) { return Contiguous(Narrow(t, 0, first, count)); }
Batch RowsOf(const Batch& b, int64_t first, int64_t count) {
  return {Rows(b.image, first, count), Rows(b.side, first, count), Rows(b.label, first, count),
          Rows(b.coarse, first, count)};
}

// What a rank does with the auxiliary head in one pass.
enum class Aux {
  kInLoss,       // computed, and its loss added
  kNotComputed,  // switched off: the output is undefined and the search finds the head unused
  kLeftOut,      // computed and returned, but left out of the loss: the head gets no gradient
};

// A rank's loss on its rows: cross entropy of the logits, plus kAuxWeight times the auxiliary one.
Tensor RankLoss(const TensorList& out, const Batch& rows, Aux aux) {
  Tensor loss = CrossEntropy(out.Get("logits"), rows.label);
  if (aux == Aux::kInLoss) loss = loss + CrossEntropy(out.Get("aux"), rows.coarse) * kAuxWeight;
  return loss;
}

// One process on the concatenated batch: the mean over ranks of every rank's RankLoss, each on its rows
// (what DDP's average of per-rank gradients equals), accumulated into the gradients with `scale`.
void ReferenceBackward(TwoInputNet& net, const Batch& batch, const std::vector<Aux>& aux, float scale) {
  bool any_aux = false;
  for (Aux a : aux) any_aux |= a != Aux::kNotComputed;
  net.set_compute_aux(any_aux);
  const TensorList out = net.ForwardMany({{"image", batch.image}, {"side", batch.side}});
  Tensor total;
  for (int r = 0; r < kWorld; ++r) {
    TensorList mine;
    mine.Add("logits", Rows(out.Get("logits"), r * kPerRank, kPerRank));
    mine.Add("aux", any_aux ? Rows(out.Get("aux"), r * kPerRank, kPerRank) : Tensor());
    const Tensor loss = RankLoss(mine, RowsOf(batch, r * kPerRank, kPerRank), aux[r]);
    total = total.defined() ? total + loss : loss;
  }
  (total * (scale / kWorld)).Backward();
}

// This rank's pass through DDP: forward with named inputs, its RankLoss scaled, backward.
void DdpBackward(DistributedDataParallel& ddp, TwoInputNet& net, const Batch& rows, Aux aux, float scale) {
  net.set_compute_aux(aux != Aux::kNotComputed);
  const TensorList out = ddp.ForwardMany({{"image", rows.image}, {"side", rows.side}});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out.Get("aux").defined(), aux != Aux::kNotComputed);
  (RankLoss(out, rows, aux) * scale).Backward();
}

NamedTensors GradientsOf(const Module& m) {
  NamedTensors grads;
  for (const auto& [name, p] : m.NamedParameters()) grads.emplace_back(name, Clone(p.grad()));
  return grads;
}

// Every parameter's gradient (or value) agrees with the reference's, within `tolerance` of its largest
// magnitude (testing/tensor_agreement.h's bound when the tolerance is 1e-5).
void ExpectAgree(const NamedTensors& got, const NamedTensors& want, double tolerance, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (tolerance <= 1e-5) {
      EXPECT_TRUE(Agree(got[i].second, want[i].second)) << got[i].first << " " << what;
    } else {
      EXPECT_LE(NormalizedError(got[i].second, want[i].second), tolerance) << got[i].first << " " << what;
    }
  }
}

// The auxiliary head's use per step and rank. Without find_unused_parameters every parameter must get a
// gradient on every rank, so it is in the loss throughout.
std::vector<std::vector<Aux>> Schedule(bool find_unused) {
  if (!find_unused) return std::vector<std::vector<Aux>>(4, {Aux::kInLoss, Aux::kInLoss});
  return {
      {Aux::kInLoss, Aux::kInLoss},            // both outputs' graphs searched: nothing unused
      {Aux::kNotComputed, Aux::kNotComputed},  // unreachable everywhere: the head keeps its gradient
      {Aux::kLeftOut, Aux::kLeftOut},          // reachable, but no gradient anywhere
      {Aux::kInLoss, Aux::kNotComputed},       // used on rank 0 only: its gradient, halved, on both
      {Aux::kLeftOut, Aux::kInLoss},           // used on rank 1 only
      {Aux::kInLoss, Aux::kInLoss},
  };
}

// Counts the buckets it reduces (with the plain all-reduce), to show a hook sees every synchronised pass.
class CountingHook : public CommHook {
 public:
  std::shared_ptr<Work> RunHook(ProcessGroup& group, GradBucket& bucket) override {
    ++buckets_reduced;
    return inner_.RunHook(group, bucket);
  }
  std::string name() const override { return "counting_allreduce"; }
  int buckets_reduced = 0;  // the training thread's only (RunHook runs on the thread running backward)

 private:
  AllReduceHook inner_;
};

DdpOptions Options(bool find_unused, bool bucket_view) {
  DdpOptions options;
  options.reducer.find_unused_parameters = find_unused;
  options.reducer.gradient_as_bucket_view = bucket_view;
  options.reducer.caps.first_bucket_cap_bytes = 128;  // 3 buckets, the aux head alone in the first
  options.reducer.caps.bucket_cap_bytes = 384;
  return options;
}

struct Case {
  bool find_unused;
  bool bucket_view;
  std::string hook;  // "" (plain all-reduce) or a MakeCommHook name
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return absl::StrCat(c.find_unused ? "find_unused" : "all_used", c.bucket_view ? "_view" : "",
                      c.hook.empty() ? "" : "_" + c.hook);
}

void PrintTo(const Case& c, std::ostream* os) { *os << CaseName(::testing::TestParamInfo<Case>(c, 0)); }

class MultiInputDdpTest : public ::testing::TestWithParam<Case> {};

// Gradients of every step and parameters after the last SGD step equal one process's on the concatenated
// batch. Without searching every output, the aux head would be found unused in the steps that use it
// and its gradient would arrive twice; without handling outputs left out of the loss, the kLeftOut steps
// would fail with parameters that got no gradient.
TEST_P(MultiInputDdpTest, MatchesOneProcessOnTheConcatenatedBatch) {
  const Case c = GetParam();
  const std::vector<std::vector<Aux>> schedule = Schedule(c.find_unused);
  const double tolerance = c.hook == "fp16" ? 2e-3 : 1e-5;  // fp16: one rounding to 11 bits per value
  SgdOptions sgd;
  sgd.lr = 0.1f;
  sgd.momentum = 0.9f;
  std::shared_ptr<TwoInputNet> reference = MakeNet();
  Sgd reference_opt(reference->Parameters(), sgd);
  std::vector<NamedTensors> reference_grads;
  for (size_t s = 0; s < schedule.size(); ++s) {
    reference->ZeroGrad();
    ReferenceBackward(*reference, GlobalBatch(s, kWorld * kPerRank), schedule[s], 1.0f);
    reference_grads.push_back(GradientsOf(*reference));
    reference_opt.Step();
  }
  RunRanks(kWorld, [&](int rank, ProcessGroup& group) {
    std::shared_ptr<TwoInputNet> net = MakeNet();
    auto ddp = DistributedDataParallel::Create(net, &group, Options(c.find_unused, c.bucket_view));
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    if (!c.hook.empty()) {
      ASSERT_TRUE((*ddp)->RegisterCommHook(*MakeCommHook(c.hook)).ok());
    }
    ASSERT_EQ((*ddp)->reducer().bucket_assignment().size(), 3u);
    Sgd opt(net->Parameters(), sgd);
    for (size_t s = 0; s < schedule.size(); ++s) {
      net->ZeroGrad();
      const Batch mine = RowsOf(GlobalBatch(s, kWorld * kPerRank), rank * kPerRank, kPerRank);
      DdpBackward(**ddp, *net, mine, schedule[s][rank], 1.0f);
      ASSERT_TRUE((*ddp)->status().ok()) << (*ddp)->status() << " step " << s;
      ExpectAgree(GradientsOf(*net), reference_grads[s], tolerance, absl::StrCat("step ", s, " rank ", rank));
      opt.Step();
    }
    ExpectAgree(net->NamedParameters(), reference->NamedParameters(), tolerance, "after the last step");
  });
}

INSTANTIATE_TEST_SUITE_P(TwoInputs, MultiInputDdpTest,
                         ::testing::Values(Case{false, false, ""}, Case{true, false, ""}, Case{true, true, ""},
                                           Case{false, true, "fp16"}, Case{true, false, "fp16"}),
                         CaseName);

// Gradient accumulation: a no_sync pass that uses the aux head, then a synchronising pass that does not
// (not computed, then left out of the loss), equal one process accumulating over both concatenated
// micro-batches. The head's gradient from the no_sync pass is in its .grad when the synchronising pass
// reduces it: it must enter the average, not zeros (Note [Gradients of unused parameters]). The comm
// hook reduces every bucket of the synchronising passes and nothing in the no_sync ones.
TEST(MultiInputDdpTest, NoSyncAccumulationWithTheAuxHeadUnusedInTheSynchronisingPass) {
  const int micro_steps = 2;
  const std::vector<Aux> sync_pass_aux[] = {{Aux::kNotComputed, Aux::kNotComputed}, {Aux::kLeftOut, Aux::kLeftOut},
                                            {Aux::kLeftOut, Aux::kNotComputed}};
  const std::vector<Aux> no_sync_aux = {Aux::kInLoss, Aux::kInLoss};
  auto micro_batch = [&](int step, int micro) { return GlobalBatch(100 + step * micro_steps + micro, kWorld * kPerRank); };
  for (const bool bucket_view : {false, true}) {
    SgdOptions sgd;
    sgd.lr = 0.1f;
    std::shared_ptr<TwoInputNet> reference = MakeNet();
    Sgd reference_opt(reference->Parameters(), sgd);
    std::vector<NamedTensors> reference_grads;
    for (int step = 0; step < 3; ++step) {
      reference->ZeroGrad();
      ReferenceBackward(*reference, micro_batch(step, 0), no_sync_aux, 1.0f / micro_steps);
      ReferenceBackward(*reference, micro_batch(step, 1), sync_pass_aux[step], 1.0f / micro_steps);
      reference_grads.push_back(GradientsOf(*reference));
      reference_opt.Step();
    }
    RunRanks(kWorld, [&](int rank, ProcessGroup& group) {
      std::shared_ptr<TwoInputNet> net = MakeNet();
      auto ddp = DistributedDataParallel::Create(net, &group, Options(/*find_unused=*/true, bucket_view));
      ASSERT_TRUE(ddp.ok()) << ddp.status();
      auto hook = std::make_shared<CountingHook>();
      ASSERT_TRUE((*ddp)->RegisterCommHook(hook).ok());
      Sgd opt(net->Parameters(), sgd);
      int expected_buckets = 0;
      for (int step = 0; step < 3; ++step) {
        net->ZeroGrad();
        {
          auto no_sync = (*ddp)->NoSync();
          DdpBackward(**ddp, *net, RowsOf(micro_batch(step, 0), rank * kPerRank, kPerRank), no_sync_aux[rank],
                      1.0f / micro_steps);
        }
        EXPECT_EQ(hook->buckets_reduced, expected_buckets) << "a no_sync pass communicated, step " << step;
        DdpBackward(**ddp, *net, RowsOf(micro_batch(step, 1), rank * kPerRank, kPerRank), sync_pass_aux[step][rank],
                    1.0f / micro_steps);
        ASSERT_TRUE((*ddp)->status().ok()) << (*ddp)->status();
        expected_buckets += static_cast<int>((*ddp)->reducer().bucket_assignment().size());
        EXPECT_EQ(hook->buckets_reduced, expected_buckets) << "step " << step;
        ExpectAgree(GradientsOf(*net), reference_grads[step], 1e-5,
                    absl::StrCat("step ", step, " rank ", rank, bucket_view ? " bucket views" : ""));
        opt.Step();
      }
      EXPECT_EQ((*ddp)->reducer().stats().size(), 3u);  // the synchronising passes only
    });
  }
}

// Without find_unused_parameters an output left out of the loss leaves the aux head without gradient:
// an error naming its parameters, as in PyTorch.
TEST(MultiInputDdpTest, OutputLeftOutOfTheLossWithoutFindUnusedIsNamed) {
  RunRanks(kWorld, [&](int rank, ProcessGroup& group) {
    std::shared_ptr<TwoInputNet> net = MakeNet();
    auto ddp = DistributedDataParallel::Create(net, &group, Options(/*find_unused=*/false, false));
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    const Batch mine = RowsOf(GlobalBatch(0, kWorld * kPerRank), rank * kPerRank, kPerRank);
    DdpBackward(**ddp, *net, mine, Aux::kLeftOut, 1.0f);
    const absl::Status status = (*ddp)->status();
    EXPECT_NE(status.message().find("aux.weight, aux.bias"), std::string::npos) << status;
    EXPECT_NE(status.message().find("find_unused_parameters"), std::string::npos) << status;
    const absl::StatusOr<TensorList> next = (*ddp)->TryForwardMany({mine.image, mine.side});
    ASSERT_FALSE(next.ok());
    EXPECT_EQ(next.status(), status);
  });
}

// A one-tensor model goes through ForwardMany too (Module's default adapts it): the same output and the
// same averaged gradients as through Forward.
TEST(MultiInputDdpTest, OneTensorModelThroughForwardMany) {
  RunRanks(kWorld, [&](int rank, ProcessGroup& group) {
    std::vector<NamedTensors> grads;
    std::vector<std::vector<float>> outputs;
    for (const bool many : {false, true}) {
      Generator g(5);
      std::shared_ptr<Module> mlp = *MakeModel("mlp", g);
      auto ddp = DistributedDataParallel::Create(mlp, &group);
      ASSERT_TRUE(ddp.ok()) << ddp.status();
      Generator data(rank);
      const Tensor x = Normal({2, 784}, 0.0f, 1.0f, data);
      const Tensor y = FromVector(std::vector<int64_t>{1, 7}, {2});
      Tensor out = many ? (*ddp)->ForwardMany({x})[0] : (*ddp)->Forward(x);
      CrossEntropy(out, y).Backward();
      ASSERT_TRUE((*ddp)->status().ok()) << (*ddp)->status();
      grads.push_back(GradientsOf(*mlp));
      outputs.push_back(out.ToVector<float>());
    }
    EXPECT_EQ(outputs[0], outputs[1]);
    for (size_t i = 0; i < grads[0].size(); ++i) {
      EXPECT_EQ(grads[0][i].second.ToVector<float>(), grads[1][i].second.ToVector<float>()) << grads[0][i].first;
    }
  });
}

}  // namespace
}  // namespace ddp
