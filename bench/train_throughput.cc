// Training throughput with pre-loaded data (no loader in the loop): the C++ side of
// bench/compare_train.sh (one process) and bench/compare_ddp.sh (DDP under ddprun). Rank 0 prints one
// JSON object:
//   {"impl": "ddpengine", "model", "batch_size", "steps", "world_size", "ddp", "samples_per_s", "step_ms",
//    "step_ms_p50", "step_ms_p90", "step_cv", "peak_rss_mb", "forward_ms", "backward_ms", "optimizer_ms",
//    "comm_ms", "exposed_comm_ms", "buckets", ...}
// samples_per_s counts every rank's samples; the comm fields are means over the timed DDP iterations; the
// step_* fields are the spread of rank 0's timed steps (bench/step_times.h), which --step_times_out writes.
//
//   bazel-bin/bench/train_throughput --model=cnn --batch_size=64 --steps=200 --threads=1
//   bazel-bin/launch/ddprun --nproc_per_node=2 bazel-bin/bench/train_throughput --model=mlp
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "bench/premade_batches.h"
#include "bench/step_times.h"
#include "comm/init.h"
#include "comm/rank_agreement.h"
#include "data/fashion_mnist.h"
#include "ddp/distributed_data_parallel.h"
#include "ddp/join.h"
#include "reducer/comm_hook.h"
#include "reducer/trace.h"
#include "train/auto_bucket_caps.h"
#include "train/stop_agreement.h"
#include "nn/layers.h"
#include "nn/models.h"
#include "nn/sgd.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "tensor/threads.h"

ABSL_FLAG(std::string, backend, "gloo", "Under a launcher: auto, gloo or shm.");
ABSL_FLAG(std::string, model, "cnn", "mlp | cnn | cnn_bn");
ABSL_FLAG(int64_t, batch_size, 64, "samples per step and rank");
ABSL_FLAG(int, steps, 200, "timed steps");
ABSL_FLAG(int, warmup, 20, "untimed steps first");
ABSL_FLAG(int, threads, 1, "kernel threads per rank");
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
ABSL_FLAG(int, powersgd_rank, 1, "--comm_hook=powersgd: matrix approximation rank");
ABSL_FLAG(int, powersgd_start_iter, 10, "--comm_hook=powersgd: plain all-reduce for this many iterations first");
ABSL_FLAG(std::string, per_step, "none",
          "DDP: none | join (the timed loop inside a ddp/join.h Join, as train/train's default: one small "
          "all-reduce per forward) | stop_check (train/stop_agreement.h without Join: an overlapped "
          "one-element all-reduce per step)");
ABSL_FLAG(std::string, step_times_out, "",
          "write each timed step's wall time (ms, one per line) to this path (every rank: \"%r\" in the path "
          "becomes the rank; bench/compare_ddp.sh's noise bound reads it)");
ABSL_FLAG(std::string, data_dir, ddp::kDefaultFashionMnistDir, "Fashion-MNIST folder");
ABSL_FLAG(bool, fuse_blocks, true,
          "run each conv -> ReLU -> pool block as one op (Note [Fusion in Sequential]); false: one op per "
          "module, as PyTorch eager");

namespace ddp {
namespace {

double PeakRssMb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss / 1024.0;
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "train_throughput: %s\n", status.ToString().c_str());
  return 1;
}

struct Timings {
  absl::Duration forward, backward, update;
};

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

int Run() {
  SetNumThreads(absl::GetFlag(FLAGS_threads));
  const int64_t batch_size = absl::GetFlag(FLAGS_batch_size);
  auto launch = ResolveLaunchEnv(ProcessEnv());
  if (!launch.ok()) return Fail(launch.status());
  std::unique_ptr<DistributedContext> dist;
  if (launch->world_size > 1 || absl::GetFlag(FLAGS_ddp)) {
    InitOptions init;
    init.backend = absl::GetFlag(FLAGS_backend);
    auto joined = InitProcessGroup(init);
    if (!joined.ok()) return Fail(joined.status());
    dist = std::move(*joined);
  }
  const int rank = launch->rank, world = launch->world_size;
  auto train = LoadFashionMnist(absl::GetFlag(FLAGS_data_dir), Split::kTrain);
  if (!train.ok()) return Fail(train.status());
  Generator generator(0);
  auto model = MakeModel(absl::GetFlag(FLAGS_model), generator);
  if (!model.ok()) return Fail(model.status());
  if (auto* sequential = dynamic_cast<nn::Sequential*>(model->get())) {
    sequential->set_fuse_blocks(absl::GetFlag(FLAGS_fuse_blocks));
  }
  std::shared_ptr<DistributedDataParallel> ddp;
  Module* net = model->get();
  double wrap_ms = 0, agreement_ms = 0;
  const std::string ablation = absl::GetFlag(FLAGS_ablation);
  if (ablation != "none" && ablation != "single_allreduce" && ablation != "no_overlap" &&
      ablation != "lockstep") {
    return Fail(
        absl::InvalidArgumentError("--ablation must be none, single_allreduce, no_overlap or lockstep"));
  }
  const bool lockstep = ablation == "lockstep";
  if (lockstep && dist == nullptr) {
    return Fail(absl::InvalidArgumentError("--ablation=lockstep needs a launcher's WORLD_SIZE > 1 or --ddp"));
  }
  if (dist != nullptr && !lockstep) {
    DdpOptions options;
    BucketCaps& caps = options.reducer.caps;
    caps.bucket_cap_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_bucket_cap_mb) * (1 << 20));
    caps.first_bucket_cap_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_first_bucket_mb) * (1 << 20));
    options.reducer.find_unused_parameters = absl::GetFlag(FLAGS_find_unused_parameters);
    options.reducer.static_graph = absl::GetFlag(FLAGS_static_graph);
    options.reducer.gradient_as_bucket_view = absl::GetFlag(FLAGS_gradient_as_bucket_view);
    options.reducer.record_trace = !absl::GetFlag(FLAGS_trace_out).empty();
    PowerSgdOptions powersgd;
    powersgd.matrix_approximation_rank = absl::GetFlag(FLAGS_powersgd_rank);
    powersgd.start_iter = absl::GetFlag(FLAGS_powersgd_start_iter);
    absl::StatusOr<std::shared_ptr<CommHook>> hook = MakeCommHook(absl::GetFlag(FLAGS_comm_hook), powersgd);
    if (!hook.ok()) return Fail(hook.status());
    options.reducer.comm_hook = *hook;
    if (ablation == "single_allreduce") {
      caps.bucket_cap_bytes = caps.first_bucket_cap_bytes = SIZE_MAX;
      options.reducer.ablations.delay_reduction = true;
    } else if (ablation == "no_overlap") {
      options.reducer.ablations.delay_reduction = true;
    }
    const absl::Time wrap_start = absl::Now();
    auto wrapped = DistributedDataParallel::Create(*model, dist->group.get(), options);
    if (!wrapped.ok()) return Fail(wrapped.status());
    wrap_ms = absl::ToDoubleMilliseconds(absl::Now() - wrap_start);
    ddp = *wrapped;
    net = ddp.get();
    absl::StatusOr<double> agreement = TimeSettingsAgreement(*dist->group);
    if (!agreement.ok()) return Fail(agreement.status());
    agreement_ms = *agreement;
  }
  std::unique_ptr<AutoBucketCaps> auto_caps;  // --auto_bucket_caps (Note [Auto bucket caps])
  if (ddp != nullptr && absl::GetFlag(FLAGS_auto_bucket_caps)) {
    AutoBucketCapsOptions auto_options;
    auto_options.measure_steps = auto_options.report_steps = absl::GetFlag(FLAGS_auto_caps_steps);
    auto_caps = AutoBucketCaps::Attach(*ddp, auto_options, stderr);
  }
  const std::string per_step = absl::GetFlag(FLAGS_per_step);
  if (per_step != "none" && per_step != "join" && per_step != "stop_check") {
    return Fail(absl::InvalidArgumentError("--per_step must be none, join or stop_check"));
  }
  std::unique_ptr<Join> join;
  if (ddp != nullptr && per_step == "join") join = std::make_unique<Join>(ddp.get());
  StopAgreement stop(ddp != nullptr && per_step != "none" ? dist->group.get() : nullptr, join.get());
  Sgd optimizer((*model)->Parameters(), BenchSgdOptions());
  absl::StatusOr<std::vector<Example>> premade = PremadeBatches(**train, batch_size);
  if (!premade.ok()) return Fail(premade.status());
  const std::vector<Example>& batches = *premade;
  const int warmup = absl::GetFlag(FLAGS_warmup), steps = absl::GetFlag(FLAGS_steps);
  if (steps < 1 || warmup < 0) {
    return Fail(absl::InvalidArgumentError(
        absl::StrFormat("--steps must be >= 1 and --warmup >= 0 (got %d and %d)", steps, warmup)));
  }
  const Tensor meeting = Zeros({1});  // --ablation=lockstep's one element
  Timings t{};
  std::vector<double> step_ms;
  step_ms.reserve(steps);
  absl::Time start;
  for (int i = 0; i < warmup + steps; ++i) {
    if (i == warmup) {
      start = absl::Now();
      t = Timings{};
    }
    const Example& batch = batches[(i * world + rank) % batches.size()];
    const absl::Time t0 = absl::Now();
    if (absl::Status begun = stop.BeginStep(false); !begun.ok()) return Fail(begun);
    (*model)->ZeroGrad();
    Tensor loss = CrossEntropy(net->Forward(batch.input), batch.target);
    const absl::Time t1 = absl::Now();
    loss.Backward();
    if (ddp != nullptr && !ddp->status().ok()) return Fail(ddp->status());
    if (lockstep) {
      if (absl::Status met = dist->group->AllReduce(meeting)->Wait(dist->group->timeout()); !met.ok()) {
        return Fail(met);
      }
    }
    const absl::Time t2 = absl::Now();
    optimizer.Step();
    if (absl::StatusOr<bool> stopped = stop.EndStep(); !stopped.ok()) return Fail(stopped.status());
    if (auto_caps != nullptr) {
      if (absl::Status chosen = auto_caps->AfterStep(); !chosen.ok()) return Fail(chosen);
    }
    const absl::Time t3 = absl::Now();
    t.update += t3 - t2;
    t.forward += t1 - t0;
    t.backward += t2 - t1;
    if (i >= warmup) step_ms.push_back(absl::ToDoubleMilliseconds(t3 - t0));
  }
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - start);
  double comm_ms = 0, exposed_ms = 0, overlapped_ms = 0, sent_kib = 0;
  int buckets = 0;
  if (ddp != nullptr) {
    const auto& stats = ddp->reducer().stats();
    for (size_t i = stats.size() - steps; i < stats.size(); ++i) {
      comm_ms += 1000.0 * stats[i].comm_s / steps;
      exposed_ms += 1000.0 * stats[i].exposed_comm_s / steps;
      overlapped_ms += 1000.0 * stats[i].overlapped_comm_s / steps;
      sent_kib += stats[i].bytes_sent / 1024.0 / steps;
    }
    buckets = static_cast<int>(ddp->reducer().bucket_assignment().size());
    if (join != nullptr) {
      absl::Status joined = join->Finish();
      if (!joined.ok()) return Fail(joined);
    }
    if (const std::string trace = absl::GetFlag(FLAGS_trace_out); !trace.empty()) {
      if (absl::Status written = WriteMergedTrace(ddp->reducer().trace(), *dist->group, trace); !written.ok()) {
        return Fail(written);
      }
    }
  }
  if (std::string path = absl::GetFlag(FLAGS_step_times_out); !path.empty()) {
    for (size_t at = path.find("%r"); at != std::string::npos; at = path.find("%r")) {
      path.replace(at, 2, std::to_string(rank));
    }
    if (absl::Status written = WriteStepTimes(path, step_ms); !written.ok()) return Fail(written);
  }
  if (dist != nullptr) {
    absl::Status done = dist->group->Barrier()->Wait(dist->group->timeout());
    if (!done.ok()) return Fail(done);
  }
  if (rank != 0) return 0;
  const bool auto_chosen = auto_caps != nullptr && auto_caps->chosen();
  const std::string auto_label = auto_chosen ? CapsMiBLabel(auto_caps->choice().caps) : "";
  const double auto_predicted_ms = auto_chosen ? 1e3 * auto_caps->choice().predicted_step_s : 0.0;
  const StepTimeSpread spread = SpreadOf(step_ms);
  std::printf(
      "{\"impl\": \"ddpengine\", \"model\": \"%s\", \"batch_size\": %ld, \"steps\": %d, \"world_size\": %d, "
      "\"ddp\": %s, \"samples_per_s\": %.1f, \"step_ms\": %.3f, \"step_ms_p50\": %.3f, "
      "\"step_ms_p90\": %.3f, \"step_cv\": %.4f, \"peak_rss_mb\": %.1f, \"forward_ms\": %.3f, "
      "\"backward_ms\": %.3f, \"optimizer_ms\": %.3f, \"comm_ms\": %.3f, \"overlapped_comm_ms\": %.3f, \"exposed_comm_ms\": %.3f, \"buckets\": %d, "
      "\"bucket_cap_mb\": %g, \"ablation\": \"%s\", \"per_step\": \"%s\", \"backend\": \"%s\", \"wrap_ms\": %.3f, "
      "\"settings_agreement_ms\": %.3f, \"auto_caps\": \"%s\", \"auto_predicted_step_ms\": %.3f, \"comm_hook\": \"%s\", "
      "\"sent_kib_per_step\": %.1f, \"gradient_as_bucket_view\": %s, \"fuse_blocks\": %s}\n",
      absl::GetFlag(FLAGS_model).c_str(), static_cast<long>(batch_size), steps, world, ddp != nullptr ? "true" : "false",
      steps * batch_size * world / elapsed, 1000.0 * elapsed / steps, spread.p50_ms, spread.p90_ms, spread.cv,
      PeakRssMb(),
      absl::ToDoubleMilliseconds(t.forward) / steps, absl::ToDoubleMilliseconds(t.backward) / steps,
      absl::ToDoubleMilliseconds(t.update) / steps, comm_ms, overlapped_ms, exposed_ms, buckets,
      absl::GetFlag(FLAGS_bucket_cap_mb), absl::GetFlag(FLAGS_ablation).c_str(), per_step.c_str(),
      dist != nullptr ? dist->group->backend_name().c_str() : "none", wrap_ms,
      agreement_ms, auto_label.c_str(), auto_predicted_ms, absl::GetFlag(FLAGS_comm_hook).c_str(), sent_kib,
      absl::GetFlag(FLAGS_gradient_as_bucket_view) ? "true" : "false",
      absl::GetFlag(FLAGS_fuse_blocks) ? "true" : "false");
  return 0;
}

}  // namespace
}  // namespace ddp

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return ddp::Run();
}
