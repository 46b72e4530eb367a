// bench/bucket_sweep.sh's configurations in one run, interleaved (Note [Interleaved sweep]). Rank 0
// prints one JSON line per configuration, in the order given:
//   {"config", "buckets", "step_ms", "comm_ms", "exposed_comm_ms", "samples_per_s", "step_ms_rounds",
//    "iterations"}
// step_ms is the median over the rounds of each block's mean step time; comm_ms and exposed_comm_ms are
// means over every timed step of the configuration; iterations lists the timed steps' iteration ranges
// ("first-end,...", end exclusive, counted from the run's first step), which `ddp_sim profile
// --iterations` reads from a --trace_out trace of the same run.
//
//   bazel-bin/launch/ddprun --nproc_per_node=2 --master_port=0 bazel-bin/bench/bucket_sweep_interleaved
//       --model=mlp --backend=shm --rounds=10 --block_steps=50
//
// Note [Interleaved sweep]
// A shared machine's speed drifts within minutes, so a sweep that runs each configuration in its own
// pair of processes, one after the other, measures the minute as much as the caps: identical layouts
// (caps 5, 25 and 100 MiB all give one bucket for the mlp) differ from run to run by more than the caps'
// effects. Here both ranks run every configuration in turn, in blocks of --block_steps
// timed steps after --block_warmup untimed ones, for --rounds rounds, switching between blocks with
// DistributedDataParallel::Rebucket and internal::SetDdpAblations (every rank switches at the same step: the
// schedule is a pure function of the flags, which the ranks check agree). A round takes seconds, so every
// configuration sees the same machine; each round starts one configuration later than the last, so none
// always runs first. The "auto" configuration is what --bucket_cap_mb=auto chooses (train/
// auto_bucket_caps.h) in a phase before the rounds; its caps then rotate with the others.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/statistics.h"
#include "bench/premade_batches.h"
#include "comm/init.h"
#include "comm/rank_agreement.h"
#include "data/fashion_mnist.h"
#include "ddp/ddp_ablations.h"
#include "ddp/distributed_data_parallel.h"
#include "train/auto_bucket_caps.h"
#include "nn/models.h"
#include "nn/sgd.h"
#include "reducer/trace.h"
#include "tensor/ops.h"
#include "tensor/threads.h"

ABSL_FLAG(std::string, backend, "gloo", "auto, gloo or shm");
ABSL_FLAG(std::string, model, "cnn", "mlp | cnn | cnn_bn | resnet18 (nn/models.h)");
ABSL_FLAG(int64_t, batch_size, 64, "samples per step and rank");
ABSL_FLAG(
    std::string, configs, "0,0.0625,0.25,1,5,25,100,default,auto,single_allreduce,no_overlap",
    "configurations: a cap in MiB (first bucket = cap), default (1/25), auto (--bucket_cap_mb=auto's "
    "choice), single_allreduce (one bucket after backward), no_overlap (default buckets after backward)");
ABSL_FLAG(int, rounds, 10, "rounds over every configuration");
ABSL_FLAG(int, block_steps, 50, "timed steps per configuration and round");
ABSL_FLAG(int, block_warmup, 3, "untimed steps after each switch");
ABSL_FLAG(int, warmup, 20, "untimed steps before anything (the bucket rebuild, warm caches)");
ABSL_FLAG(int, auto_caps_steps, 20, "the auto configuration: steps measured before the choice and after it");
ABSL_FLAG(std::string, trace_out, "", "write a Chrome trace of the whole run (merged over ranks) here");
ABSL_FLAG(std::string, data_dir, ddp::kDefaultFashionMnistDir, "Fashion-MNIST folder");

namespace ddp {
namespace {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "bucket_sweep_interleaved: %s\n", status.ToString().c_str());
  return 1;
}

// One configuration of the sweep and what was measured under it.
struct SweepConfig {
  std::string label;  // the row name bench/bucket_sweep.sh uses ("0.25", "default 1/25", "auto 1/25", ...)
  BucketCaps caps;
  bool delay_reduction = false;
  bool is_auto = false;  // caps filled in by the auto phase
  std::vector<double> block_step_ms;
  double comm_ms_sum = 0, exposed_ms_sum = 0;
  int timed_steps = 0, buckets = 0;
  std::vector<std::pair<int64_t, int64_t>> iterations;  // timed steps, [first, end)
};

absl::StatusOr<std::vector<SweepConfig>> ParseConfigs(const std::string& text) {
  constexpr double kMiB = 1 << 20;
  std::vector<SweepConfig> configs;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    SweepConfig c;
    c.label = std::string(item);
    c.caps = BucketCaps{};  // PyTorch's default: first 1 MiB, then 25 MiB
    double mib = 0;
    if (item == "default") {
      c.label = "default 1/25";
    } else if (item == "auto") {
      c.is_auto = true;
    } else if (item == "single_allreduce") {
      c.caps = BucketCaps{SIZE_MAX, SIZE_MAX};
      c.delay_reduction = true;
    } else if (item == "no_overlap") {
      c.delay_reduction = true;
    } else if (absl::SimpleAtod(item, &mib) && mib >= 0 && mib < 1e6) {
      c.caps.bucket_cap_bytes = c.caps.first_bucket_cap_bytes = static_cast<size_t>(mib * kMiB);
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "--configs: \"", item, "\" is not a cap in MiB, default, auto, single_allreduce or no_overlap"));
    }
    configs.push_back(std::move(c));
  }
  if (configs.empty()) return absl::InvalidArgumentError("--configs names no configuration");
  return configs;
}

// The training step every configuration runs, with the batches bench/train_throughput uses (rank r takes
// batch (i*W + r) % 64 of 64 pre-made ones).
class Stepper {
 public:
  Stepper(DistributedDataParallel& ddp, Module& model, std::vector<Example> batches, int rank, int world)
      : ddp_(ddp),
        model_(model),
        batches_(std::move(batches)),
        rank_(rank),
        world_(world),
        optimizer_(model.Parameters(), BenchSgdOptions()) {}

  absl::Status Step() {
    const Example& batch = batches_[(step_ * world_ + rank_) % batches_.size()];
    ++step_;
    model_.ZeroGrad();
    Tensor loss = CrossEntropy(ddp_.Forward(batch.input), batch.target);
    loss.Backward();
    DDP_RETURN_IF_ERROR(ddp_.status());
    optimizer_.Step();
    return absl::OkStatus();
  }
  // Steps taken so far (the next step's iteration index).
  int64_t steps() const { return step_; }

 private:
  DistributedDataParallel& ddp_;
  Module& model_;
  std::vector<Example> batches_;
  int rank_, world_;
  Sgd optimizer_;
  int64_t step_ = 0;
};

// Runs --bucket_cap_mb=auto's measurement, choice and report (the skipped steps, --auto_caps_steps + 1
// twice, and a margin); returns the chosen caps. The controller stays attached to the Reducer (an
// observer) for the rest of the run, so `holder` keeps it.
absl::StatusOr<BucketCaps> RunAutoPhase(DistributedDataParallel& ddp, Stepper& stepper,
                                        std::unique_ptr<AutoBucketCaps>& holder) {
  AutoBucketCapsOptions options;
  options.measure_steps = options.report_steps = absl::GetFlag(FLAGS_auto_caps_steps);
  holder = AutoBucketCaps::Attach(ddp, options, stderr);
  AutoBucketCaps* auto_caps = holder.get();
  const int limit = options.skip_iterations + 2 * (options.measure_steps + 1) + 20;
  for (int i = 0; i < limit && auto_caps->measured_after_s() < 0; ++i) {
    DDP_RETURN_IF_ERROR(stepper.Step());
    DDP_RETURN_IF_ERROR(auto_caps->AfterStep());
  }
  if (!auto_caps->chosen()) {
    return absl::DeadlineExceededError(absl::StrCat("--bucket_cap_mb=auto made no choice in ", limit, " steps"));
  }
  return auto_caps->choice().caps;
}

// One block: switch to `config`, warm up, time --block_steps steps.
absl::Status RunBlock(DistributedDataParallel& ddp, Stepper& stepper, SweepConfig& config) {
  ddp.Rebucket(config.caps);
  internal::ReducerAblations ablations;
  ablations.delay_reduction = config.delay_reduction;
  internal::SetDdpAblations(ddp, ablations);
  for (int i = 0; i < absl::GetFlag(FLAGS_block_warmup); ++i) DDP_RETURN_IF_ERROR(stepper.Step());
  const int steps = absl::GetFlag(FLAGS_block_steps);
  const size_t first_stat = ddp.reducer().stats().size();
  const int64_t first_step = stepper.steps();
  const absl::Time start = absl::Now();
  for (int i = 0; i < steps; ++i) DDP_RETURN_IF_ERROR(stepper.Step());
  config.block_step_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - start) / steps);
  const auto& stats = ddp.reducer().stats();
  for (size_t i = first_stat; i < stats.size(); ++i) {
    config.comm_ms_sum += 1e3 * stats[i].comm_s;
    config.exposed_ms_sum += 1e3 * stats[i].exposed_comm_s;
  }
  config.timed_steps += steps;
  config.buckets = static_cast<int>(ddp.reducer().bucket_assignment().size());
  config.iterations.emplace_back(first_step, stepper.steps());
  return absl::OkStatus();
}


void PrintRow(const SweepConfig& c, int64_t samples_per_step) {
  std::vector<std::string> rounds, ranges;
  for (double ms : c.block_step_ms) rounds.push_back(absl::StrFormat("%.3f", ms));
  for (const auto& [first, end] : c.iterations) ranges.push_back(absl::StrCat(first, "-", end));
  const double step_ms = Median(c.block_step_ms);
  std::printf(
      "{\"config\": \"%s\", \"buckets\": %d, \"step_ms\": %.3f, \"comm_ms\": %.3f, \"exposed_comm_ms\": "
      "%.3f, "
      "\"samples_per_s\": %.1f, \"step_ms_rounds\": [%s], \"iterations\": \"%s\"}\n",
      c.label.c_str(), c.buckets, step_ms, c.comm_ms_sum / c.timed_steps, c.exposed_ms_sum / c.timed_steps,
      1e3 * samples_per_step / step_ms, absl::StrJoin(rounds, ", ").c_str(),
      absl::StrJoin(ranges, ",").c_str());
}

// The flags that fix the schedule, which every rank must share (or the ranks would rebucket at
// different steps and their buckets would not match).
absl::Status CheckScheduleAgrees(ProcessGroup& group) {
  std::vector<AgreedField> fields = {
      {"--model", absl::GetFlag(FLAGS_model)},
      {"--batch_size", absl::StrCat(absl::GetFlag(FLAGS_batch_size))},
      {"--configs", absl::GetFlag(FLAGS_configs)},
      {"--rounds", absl::StrCat(absl::GetFlag(FLAGS_rounds))},
      {"--block_steps", absl::StrCat(absl::GetFlag(FLAGS_block_steps))},
      {"--block_warmup", absl::StrCat(absl::GetFlag(FLAGS_block_warmup))},
      {"--warmup", absl::StrCat(absl::GetFlag(FLAGS_warmup))},
      {"--auto_caps_steps", absl::StrCat(absl::GetFlag(FLAGS_auto_caps_steps))},
  };
  return CheckRanksAgree(group, fields, "bucket_sweep_interleaved");
}

absl::Status CheckFlags() {
  if (absl::GetFlag(FLAGS_rounds) < 1 || absl::GetFlag(FLAGS_block_steps) < 1 ||
      absl::GetFlag(FLAGS_block_warmup) < 0 || absl::GetFlag(FLAGS_warmup) < 2 ||
      absl::GetFlag(FLAGS_auto_caps_steps) < 1) {
    return absl::InvalidArgumentError(
        "--rounds, --block_steps and --auto_caps_steps must be >= 1, --block_warmup >= 0, --warmup >= 2 "
        "(the bucket rebuild happens in the second step)");
  }
  return absl::OkStatus();
}

absl::Status RunSweep() {
  SetNumThreads(1);
  DDP_RETURN_IF_ERROR(CheckFlags());
  DDP_ASSIGN_OR_RETURN(std::vector<SweepConfig> configs, ParseConfigs(absl::GetFlag(FLAGS_configs)));
  InitOptions init;
  init.backend = absl::GetFlag(FLAGS_backend);
  DDP_ASSIGN_OR_RETURN(std::unique_ptr<DistributedContext> dist, InitProcessGroup(init));
  ProcessGroup& group = *dist->group;
  DDP_RETURN_IF_ERROR(CheckScheduleAgrees(group));
  DDP_ASSIGN_OR_RETURN(auto train, LoadFashionMnist(absl::GetFlag(FLAGS_data_dir), Split::kTrain));
  Generator generator(0);
  DDP_ASSIGN_OR_RETURN(std::shared_ptr<Module> model, MakeModel(absl::GetFlag(FLAGS_model), generator));
  DdpOptions options;
  options.reducer.record_trace = !absl::GetFlag(FLAGS_trace_out).empty();
  DDP_ASSIGN_OR_RETURN(std::shared_ptr<DistributedDataParallel> ddp,
                       DistributedDataParallel::Create(model, &group, options));
  const int64_t batch_size = absl::GetFlag(FLAGS_batch_size);
  DDP_ASSIGN_OR_RETURN(std::vector<Example> batches, PremadeBatches(*train, batch_size));
  Stepper stepper(*ddp, *model, std::move(batches), group.rank(), group.size());
  for (int i = 0; i < absl::GetFlag(FLAGS_warmup); ++i) DDP_RETURN_IF_ERROR(stepper.Step());
  std::unique_ptr<AutoBucketCaps> auto_caps;  // declared after ddp: destroyed before it
  if (std::any_of(configs.begin(), configs.end(), [](const SweepConfig& c) { return c.is_auto; })) {
    DDP_ASSIGN_OR_RETURN(BucketCaps chosen, RunAutoPhase(*ddp, stepper, auto_caps));
    for (SweepConfig& c : configs) {
      if (c.is_auto) c.caps = chosen, c.label = "auto " + CapsMiBLabel(chosen);
    }
  }
  const size_t n = configs.size();
  for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    for (size_t k = 0; k < n; ++k) DDP_RETURN_IF_ERROR(RunBlock(*ddp, stepper, configs[(round + k) % n]));
  }
  if (const std::string trace = absl::GetFlag(FLAGS_trace_out); !trace.empty()) {
    DDP_RETURN_IF_ERROR(WriteMergedTrace(ddp->reducer().trace(), group, trace));
  }
  DDP_RETURN_IF_ERROR(group.Barrier()->Wait(group.timeout()));
  if (group.rank() == 0) {
    for (const SweepConfig& c : configs) PrintRow(c, batch_size * group.size());
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace ddp

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  absl::Status status = ddp::RunSweep();
  if (!status.ok()) return ddp::Fail(status);
  return 0;
}
