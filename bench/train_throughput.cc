// Training throughput of train/train's step loop (train/train_step.h RunSteps, set up by train/setup.h)
// with pre-made batches instead of the loader: the C++ side of bench/compare_train.sh (one process) and
// bench/compare_ddp.sh (DDP under ddprun). Rank 0 prints one JSON object:
//   {"impl": "ddpengine", "model", "batch_size", "steps", "world_size", "ddp", "samples_per_s", "step_ms",
//    "step_ms_p50", "step_ms_p90", "step_cv", "peak_rss_mb", "forward_ms", "backward_ms", "optimizer_ms",
//    "comm_ms", "exposed_comm_ms", "buckets", ...}
// samples_per_s counts every rank's samples; forward/backward/optimizer_ms are the loop's phases
// (train/step_timer.h) and the comm fields means over the timed DDP iterations; the step_* fields are the
// spread of rank 0's timed steps (bench/step_times.h), which --step_times_out writes.
//
//   bazel-bin/bench/train_throughput --model=cnn --batch_size=64 --steps=200 --threads=1
//   bazel-bin/launch/ddprun --nproc_per_node=2 bazel-bin/bench/train_throughput --model=mlp
#include <algorithm>
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/peak_rss.h"
#include "bench/premade_batches.h"
#include "bench/step_times.h"
#include "comm/init.h"
#include "comm/rank_agreement.h"
#include "data/fashion_mnist.h"
#include "ddp/distributed_data_parallel.h"
#include "nn/layers.h"
#include "nn/resnet.h"
#include "reducer/trace.h"
#include "tensor/factory.h"
#include "tensor/threads.h"
#include "train/auto_bucket_caps.h"
#include "train/batch_source.h"
#include "train/setup.h"
#include "train/step_timer.h"
#include "train/train_config.h"
#include "train/train_step.h"

ABSL_FLAG(std::string, backend, "gloo", "Under a launcher: auto, gloo or shm.");
ABSL_FLAG(std::string, model, "cnn", "mlp | cnn | cnn_bn | resnet18");
ABSL_FLAG(int, accumulate_steps, 1, "backward passes per optimizer step (under DDP, no_sync for all but the last)");
ABSL_FLAG(int64_t, batch_size, 64, "samples per step and rank");
ABSL_FLAG(int, steps, 200, "timed optimizer steps");
ABSL_FLAG(int, warmup, 20, "untimed optimizer steps first");
ABSL_FLAG(int, threads, 1, "kernel threads per rank");
ABSL_FLAG(bool, adapt_threads, false,
          "choose the kernel thread count up to --threads by timing steps (train's --adapt_threads)");
ABSL_FLAG(std::string, precision, "fp32",
          "fp32 | bf16 | fp16 (autocast, as train's --precision; fp16 with train's loss scaler at its "
          "defaults; docs/mixed_precision.md)");
ABSL_FLAG(bool, ddp, false, "wrap in DDP even when WORLD_SIZE is 1 (measures DDP's own overhead)");
ABSL_FLAG(double, bucket_cap_mb, 25, "DDP bucket cap (MiB); 0: one bucket per parameter");
ABSL_FLAG(double, first_bucket_mb, 1, "DDP first bucket cap (MiB)");
ABSL_FLAG(bool, auto_bucket_caps, false,
          "DDP: --bucket_cap_mb=auto (train/auto_bucket_caps.h): measure, choose the caps with the "
          "step simulator, rebucket; give enough --warmup steps (5 + --auto_caps_steps + 1) that the "
          "timed steps all run under the chosen caps");
ABSL_FLAG(int, auto_caps_steps, 20, "--auto_bucket_caps: steps measured before the choice and after it");
ABSL_FLAG(std::string, ablation, "none",
          "none | single_allreduce (one bucket, reduced after backward) | no_overlap (buckets reduced after "
          "backward) | lockstep (no DDP: each rank trains its own replica and the ranks only meet in a "
          "one-element all-reduce after each backward; what 2-rank training would reach if its gradients "
          "cost nothing to move)");
ABSL_FLAG(bool, find_unused_parameters, false, "DDP: search for unused parameters every iteration");
ABSL_FLAG(bool, gradient_as_bucket_view, false,
          "DDP: .grad tensors are views into the buckets (no copy in or back; PyTorch's option of that name)");
ABSL_FLAG(std::string, trace_out, "",
          "DDP: write a Chrome trace of every step (rank 0's file; merged over ranks) to this path; "
          "`ddp_sim profile --trace` reads it");
ABSL_FLAG(bool, static_graph, false, "DDP: static_graph (with --find_unused_parameters: search once)");
ABSL_FLAG(std::string, comm_hook, "none", "DDP comm hook: none | fp16 | bf16 | powersgd (reducer/comm_hook.h)");
ABSL_FLAG(std::string, reduce_dtype, "fp32",
          "DDP: fp32 | bf16 (the buckets and the all-reduce in bf16: half the bytes; train/train's flag)");
ABSL_FLAG(int, powersgd_rank, 1, "--comm_hook=powersgd: matrix approximation rank");
ABSL_FLAG(int, powersgd_start_iter, 10, "--comm_hook=powersgd: plain all-reduce for this many iterations first");
ABSL_FLAG(std::string, per_step, "none",
          "DDP: none | join (the timed loop inside a ddp/join.h Join, as train/train's default: one small "
          "all-reduce per forward) | stop_check (train/stop_agreement.h without Join: an overlapped "
          "one-element all-reduce per step)");
ABSL_FLAG(std::string, step_times_out, "",
          "write each timed step's wall time (ms, one per line) to this path (every rank: \"%r\" in the path "
          "becomes the rank; bench/compare_ddp.sh's noise bound reads it)");
ABSL_FLAG(std::string, dataset, "fashion_mnist",
          "train/train's --dataset: fashion_mnist | mnist | cifar10 | cifar100");
ABSL_FLAG(std::string, data_dir, "", "train/train's --data_dir (\"\": Fashion-MNIST's Debian folder)");
ABSL_FLAG(
    std::string, memory_format, "auto",
    "auto | contiguous | channels_last: resnet18's activations NCHW or NHWC (train/train's --memory_format: "
    "auto = channels_last for resnet18 under bf16)");
ABSL_FLAG(bool, fuse_blocks, true,
          "run each conv -> ReLU -> pool block (and resnet's BatchNorm -> add -> ReLU) as one op (Note "
          "[Fusion in Sequential], BasicBlock::set_fuse_blocks); false: one op per module, as PyTorch eager");

namespace ddp {
namespace {

double PeakRssMb() { return static_cast<double>(PeakRssBytes()) / (1 << 20); }

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "train_throughput: %s\n", status.ToString().c_str());
  return 1;
}

// The exchange DDP makes at wrap time to check its settings (Note [DDP settings agreement]), timed
// alone: the same number of fields and about the same bytes, median of 20 calls, in milliseconds.
absl::StatusOr<double> TimeSettingsAgreement(ProcessGroup& group) {
  std::vector<AgreedField> fields;
  for (int i = 0; i < 10; ++i) fields.push_back({absl::StrCat("setting_", i), std::string(24, 'x')});
  std::vector<double> ms;
  for (int i = 0; i < 20; ++i) {
    const absl::Time start = absl::Now();
    DDP_RETURN_IF_ERROR(CheckRanksAgree(group, fields, "bench"));
    ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - start));
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// The pre-made batches in bench/premade_batches.h's order: at its k-th batch, rank r of W takes batch
// (k * W + r) % 64, without end.
class PremadeBatchSource : public BatchSource {
 public:
  PremadeBatchSource(std::vector<Example> batches, int rank, int world)
      : batches_(std::move(batches)), rank_(rank), world_(world) {}

  absl::StatusOr<std::optional<Example>> Next() override {
    const Example& batch = batches_[(next_ * world_ + rank_) % batches_.size()];
    ++next_;
    return batch;
  }

 private:
  const std::vector<Example> batches_;
  const int rank_;
  const int world_;
  int64_t next_ = 0;
};

// --ablation=lockstep: after each backward pass the ranks meet in a one-element all-reduce and nothing
// else, so each trains its own replica at the pace of the slowest.
class LockstepMeeting : public StepObserver {
 public:
  explicit LockstepMeeting(ProcessGroup& group) : group_(group), meeting_(Zeros({1})) {}

  absl::Status BackwardDone() override { return group_.AllReduce(meeting_)->Wait(group_.timeout()); }

 private:
  ProcessGroup& group_;
  const Tensor meeting_;
};

// train/train's configuration for the benchmark's flags; the flags train/train has too keep their meaning.
absl::StatusOr<TrainConfig> ConfigFromFlags() {
  TrainConfig config;
  config.model = absl::GetFlag(FLAGS_model);
  config.batch_size = absl::GetFlag(FLAGS_batch_size);
  config.accumulate_steps = absl::GetFlag(FLAGS_accumulate_steps);
  config.threads = absl::GetFlag(FLAGS_threads);
  config.adapt_threads = absl::GetFlag(FLAGS_adapt_threads);
  config.precision = absl::GetFlag(FLAGS_precision);
  config.memory_format = absl::GetFlag(FLAGS_memory_format);
  config.dataset = absl::GetFlag(FLAGS_dataset);
  config.data_dir = absl::GetFlag(FLAGS_data_dir);
  const SgdOptions sgd = BenchSgdOptions();  // the PyTorch reference's optimizer, at a constant rate
  config.optimizer = "sgd";
  config.lr = sgd.lr;
  config.momentum = sgd.momentum;
  config.lr_schedule = "constant";
  config.backend = absl::GetFlag(FLAGS_backend);
  config.bucket_cap_mb =
      absl::GetFlag(FLAGS_auto_bucket_caps) ? std::string("auto") : absl::StrCat(absl::GetFlag(FLAGS_bucket_cap_mb));
  config.auto_caps_steps = absl::GetFlag(FLAGS_auto_caps_steps);
  config.first_bucket_mb = absl::GetFlag(FLAGS_first_bucket_mb);
  config.find_unused_parameters = absl::GetFlag(FLAGS_find_unused_parameters);
  config.static_graph = absl::GetFlag(FLAGS_static_graph);
  config.grad_as_bucket_view = absl::GetFlag(FLAGS_gradient_as_bucket_view);
  config.trace_out = absl::GetFlag(FLAGS_trace_out);
  config.comm_hook = absl::GetFlag(FLAGS_comm_hook);
  config.reduce_dtype = absl::GetFlag(FLAGS_reduce_dtype);
  if (config.reduce_dtype != "fp32" && config.reduce_dtype != "bf16") {
    return absl::InvalidArgumentError(
        absl::StrCat("--reduce_dtype must be fp32 or bf16, got \"", config.reduce_dtype, "\""));
  }
  config.powersgd_rank = absl::GetFlag(FLAGS_powersgd_rank);
  config.powersgd_start_iter = absl::GetFlag(FLAGS_powersgd_start_iter);
  config.join = absl::GetFlag(FLAGS_per_step) == "join";
  DDP_RETURN_IF_ERROR(ValidateConfig(config));
  return config;
}

// DDP's options for `config` with --ablation's change to the Reducer.
absl::StatusOr<DdpOptions> BenchDdpOptions(const TrainConfig& config, const std::string& ablation) {
  DDP_ASSIGN_OR_RETURN(DdpOptions options, DdpOptionsFor(config));
  if (ablation == "single_allreduce") {
    options.reducer.caps.bucket_cap_bytes = options.reducer.caps.first_bucket_cap_bytes = SIZE_MAX;
    options.reducer.ablations.delay_reduction = true;
  } else if (ablation == "no_overlap") {
    options.reducer.ablations.delay_reduction = true;
  }
  return options;
}

// What the loop's DDP did per timed step (zeros without DDP).
struct CommSummary {
  double comm_ms = 0, overlapped_ms = 0, exposed_ms = 0, sent_kib = 0;
  int buckets = 0;
};

CommSummary SummariseComm(const DistributedDataParallel* ddp, int steps) {
  CommSummary out;
  if (ddp == nullptr) return out;
  const auto& stats = ddp->reducer().stats();
  const size_t timed = std::min(stats.size(), static_cast<size_t>(steps));
  for (size_t i = stats.size() - timed; i < stats.size(); ++i) {
    out.comm_ms += 1000.0 * stats[i].comm_s / steps;
    out.exposed_ms += 1000.0 * stats[i].exposed_comm_s / steps;
    out.overlapped_ms += 1000.0 * stats[i].overlapped_comm_s / steps;
    out.sent_kib += stats[i].bytes_sent / 1024.0 / steps;
  }
  out.buckets = static_cast<int>(ddp->reducer().bucket_assignment().size());
  return out;
}

// The set-up the JSON reports beside the timings.
struct RunFacts {
  int world = 1;
  bool ddp = false;
  std::string backend = "none";
  double wrap_ms = 0, agreement_ms = 0;
  std::string auto_caps;  // the chosen caps' label, "" when none were chosen
  double auto_predicted_ms = 0;
  std::string memory_format;  // what --memory_format resolved to: "channels_last" or "contiguous"
};

void PrintResult(const RunFacts& facts, const std::vector<StepTime>& timed, const CommSummary& comm,
                 const std::string& per_step) {
  const int steps = static_cast<int>(timed.size());
  const double elapsed = absl::ToDoubleSeconds(timed.back().ended - timed.front().began);
  absl::Duration forward, backward, update;
  std::vector<double> step_ms;
  for (const StepTime& t : timed) {
    forward += t.forward;
    backward += t.backward;
    update += t.update;
    step_ms.push_back(absl::ToDoubleMilliseconds(t.total()));
  }
  const int64_t batch_size = absl::GetFlag(FLAGS_batch_size);
  const int64_t samples_per_step = batch_size * absl::GetFlag(FLAGS_accumulate_steps) * facts.world;
  const StepTimeSpread spread = SpreadOf(step_ms);
  std::printf(
      "{\"impl\": \"ddpengine\", \"model\": \"%s\", \"batch_size\": %ld, \"steps\": %d, \"world_size\": %d, "
      "\"ddp\": %s, \"samples_per_s\": %.1f, \"step_ms\": %.3f, \"step_ms_p50\": %.3f, "
      "\"step_ms_p90\": %.3f, \"step_cv\": %.4f, \"peak_rss_mb\": %.1f, \"forward_ms\": %.3f, "
      "\"backward_ms\": %.3f, \"optimizer_ms\": %.3f, \"comm_ms\": %.3f, \"overlapped_comm_ms\": %.3f, "
      "\"exposed_comm_ms\": %.3f, \"buckets\": %d, \"bucket_cap_mb\": %g, \"ablation\": \"%s\", "
      "\"per_step\": \"%s\", \"backend\": \"%s\", \"wrap_ms\": %.3f, \"settings_agreement_ms\": %.3f, "
      "\"auto_caps\": \"%s\", \"auto_predicted_step_ms\": %.3f, \"comm_hook\": \"%s\", "
      "\"sent_kib_per_step\": %.1f, \"reduce_dtype\": \"%s\", \"gradient_as_bucket_view\": %s, "
      "\"fuse_blocks\": %s, "
      "\"precision\": \"%s\", \"memory_format\": \"%s\", \"dataset\": \"%s\"}\n",
      absl::GetFlag(FLAGS_model).c_str(), static_cast<long>(batch_size), steps, facts.world,
      facts.ddp ? "true" : "false", steps * samples_per_step / elapsed, 1000.0 * elapsed / steps,
      spread.p50_ms, spread.p90_ms, spread.cv, PeakRssMb(), absl::ToDoubleMilliseconds(forward) / steps,
      absl::ToDoubleMilliseconds(backward) / steps, absl::ToDoubleMilliseconds(update) / steps, comm.comm_ms,
      comm.overlapped_ms, comm.exposed_ms, comm.buckets, absl::GetFlag(FLAGS_bucket_cap_mb),
      absl::GetFlag(FLAGS_ablation).c_str(), per_step.c_str(), facts.backend.c_str(), facts.wrap_ms,
      facts.agreement_ms, facts.auto_caps.c_str(), facts.auto_predicted_ms,
      absl::GetFlag(FLAGS_comm_hook).c_str(), comm.sent_kib, absl::GetFlag(FLAGS_reduce_dtype).c_str(),
      absl::GetFlag(FLAGS_gradient_as_bucket_view) ? "true" : "false",
      absl::GetFlag(FLAGS_fuse_blocks) ? "true" : "false", absl::GetFlag(FLAGS_precision).c_str(),
      facts.memory_format.c_str(), absl::GetFlag(FLAGS_dataset).c_str());
}

// --step_times_out: each timed step's milliseconds, to the path with "%r" replaced by the rank.
absl::Status WriteStepTimesOf(const std::vector<StepTime>& timed, int rank) {
  std::string path = absl::GetFlag(FLAGS_step_times_out);
  if (path.empty()) return absl::OkStatus();
  for (size_t at = path.find("%r"); at != std::string::npos; at = path.find("%r")) {
    path.replace(at, 2, std::to_string(rank));
  }
  std::vector<double> step_ms;
  for (const StepTime& t : timed) step_ms.push_back(absl::ToDoubleMilliseconds(t.total()));
  return WriteStepTimes(path, step_ms);
}

absl::Status CheckBenchFlags(const std::string& ablation, const std::string& per_step) {
  if (ablation != "none" && ablation != "single_allreduce" && ablation != "no_overlap" && ablation != "lockstep") {
    return absl::InvalidArgumentError("--ablation must be none, single_allreduce, no_overlap or lockstep");
  }
  if (per_step != "none" && per_step != "join" && per_step != "stop_check") {
    return absl::InvalidArgumentError("--per_step must be none, join or stop_check");
  }
  const int warmup = absl::GetFlag(FLAGS_warmup), steps = absl::GetFlag(FLAGS_steps);
  if (steps < 1 || warmup < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--steps must be >= 1 and --warmup >= 0 (got %d and %d)", steps, warmup));
  }
  return absl::OkStatus();
}

absl::Status Run() {
  const std::string ablation = absl::GetFlag(FLAGS_ablation), per_step = absl::GetFlag(FLAGS_per_step);
  DDP_RETURN_IF_ERROR(CheckBenchFlags(ablation, per_step));
  DDP_ASSIGN_OR_RETURN(const TrainConfig config, ConfigFromFlags());
  SetNumThreads(config.threads);
  DDP_ASSIGN_OR_RETURN(const LaunchEnv launch, ResolveLaunchEnv(ProcessEnv()));
  std::unique_ptr<DistributedContext> dist;
  if (launch.world_size > 1 || absl::GetFlag(FLAGS_ddp)) {
    InitOptions init;
    init.backend = config.backend;
    DDP_ASSIGN_OR_RETURN(dist, InitProcessGroup(init));
  }
  const bool lockstep = ablation == "lockstep";
  if (lockstep && dist == nullptr) {
    return absl::InvalidArgumentError("--ablation=lockstep needs a launcher's WORLD_SIZE > 1 or --ddp");
  }
  RunFacts facts;
  facts.memory_format = ResolvedMemoryFormat(config);
  facts.world = launch.world_size;
  DDP_ASSIGN_OR_RETURN(auto train, LoadDataSplit(config, Split::kTrain));
  DDP_ASSIGN_OR_RETURN(std::shared_ptr<Module> model, BuildModel(config, Device::CPU()));
  if (auto* sequential = dynamic_cast<nn::Sequential*>(model.get())) {
    sequential->set_fuse_blocks(absl::GetFlag(FLAGS_fuse_blocks));
  }
  if (auto* resnet = dynamic_cast<nn::ResNet*>(model.get())) resnet->set_fuse_blocks(absl::GetFlag(FLAGS_fuse_blocks));
  std::shared_ptr<DistributedDataParallel> ddp;
  if (dist != nullptr && !lockstep) {
    DDP_ASSIGN_OR_RETURN(const DdpOptions options, BenchDdpOptions(config, ablation));
    const absl::Time wrap_start = absl::Now();
    DDP_ASSIGN_OR_RETURN(ddp, WrapDdp(config, model, Device::CPU(), dist->group.get(), options));
    facts.wrap_ms = absl::ToDoubleMilliseconds(absl::Now() - wrap_start);
    DDP_ASSIGN_OR_RETURN(facts.agreement_ms, TimeSettingsAgreement(*dist->group));
    facts.ddp = true;
  }
  if (dist != nullptr) facts.backend = dist->group->backend_name();
  std::unique_ptr<AutoBucketCaps> auto_caps;  // --auto_bucket_caps (Note [Auto bucket caps])
  if (ddp != nullptr && AutoBucketCapsRequested(config)) {
    AutoBucketCapsOptions auto_options;
    auto_options.measure_steps = auto_options.report_steps = config.auto_caps_steps;
    auto_caps = AutoBucketCaps::Attach(*ddp, auto_options, stderr);
  }
  DDP_ASSIGN_OR_RETURN(const std::vector<Example> premade, PremadeBatches(*train, config.batch_size));
  PremadeBatchSource batches(premade, launch.rank, launch.world_size);
  DDP_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer, MakeOptimizer(config, model->Parameters()));
  TrainState state{config, *model, ddp.get(), *optimizer, launch.rank, launch.world_size};
  state.group = dist != nullptr ? dist->group.get() : nullptr;
  const std::unique_ptr<GradScaler> scaler = MakeGradScaler(config);  // --precision=fp16
  state.scaler = scaler.get();
  state.auto_caps = auto_caps.get();
  const int warmup = absl::GetFlag(FLAGS_warmup), steps = absl::GetFlag(FLAGS_steps);
  state.total_steps = warmup + steps;
  state.loop.agree_on_stop = per_step != "none";
  state.loop.progress = nullptr;
  std::unique_ptr<LockstepMeeting> meeting;
  if (lockstep) {
    meeting = std::make_unique<LockstepMeeting>(*dist->group);
    state.loop.observers.push_back(meeting.get());
  }
  // --adapt_threads: sets each step's thread count before the timer starts.
  const std::unique_ptr<AdaptiveThreads> adaptive_threads = AttachAdaptiveThreads(config, state);
  StepTimer timer;  // last: the lockstep meeting counts in the backward phase
  state.loop.observers.push_back(&timer);
  DDP_RETURN_IF_ERROR(RunSteps(state, /*epoch=*/1, batches, warmup + steps).status());
  const std::vector<StepTime> timed(timer.steps().end() - steps, timer.steps().end());
  if (ddp != nullptr && !config.trace_out.empty()) {
    DDP_RETURN_IF_ERROR(WriteMergedTrace(ddp->reducer().trace(), *dist->group, config.trace_out));
  }
  DDP_RETURN_IF_ERROR(WriteStepTimesOf(timed, launch.rank));
  if (dist != nullptr) DDP_RETURN_IF_ERROR(dist->group->Barrier()->Wait(dist->group->timeout()));
  if (launch.rank != 0) return absl::OkStatus();
  if (auto_caps != nullptr && auto_caps->chosen()) {
    facts.auto_caps = CapsMiBLabel(auto_caps->choice().caps);
    facts.auto_predicted_ms = 1e3 * auto_caps->choice().predicted_step_s;
  }
  PrintResult(facts, timed, SummariseComm(ddp.get(), steps), per_step);
  return absl::OkStatus();
}

}  // namespace
}  // namespace ddp

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const absl::Status status = ddp::Run();
  return status.ok() ? 0 : ddp::Fail(status);
}
