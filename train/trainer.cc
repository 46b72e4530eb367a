// RunTraining: set-up (data, model, optimizer, process group, DDP) and the epoch loop.
#include "train/trainer.h"

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/peak_rss.h"
#include "base/usable_cpus.h"
#include "checkpoint/checkpoint.h"
#include "comm/init.h"
#include "data/data_loader.h"
#include "data/image_dataset_catalog.h"
#include "data/sampler.h"
#include "ddp/distributed_data_parallel.h"
#include "ddp/distributed_eval.h"
#include "ddp/module_trace.h"
#include "ddp/rank_zero.h"
#include "ddp/zero_reduce_scatter_hook.h"
#include "ddp/zero_redundancy_optimizer.h"
#include "dp/data_parallel.h"
#include "nn/weights_file.h"
#include "reducer/iteration_stats.h"
#include "store/store_keys.h"
#include "tensor/autograd.h"
#include "tensor/ops.h"
#include "tensor/threads.h"
#include "train/adaptive_threads.h"
#include "train/auto_bucket_caps.h"
#include "train/elastic_loop.h"
#include "train/epoch_report.h"
#include "train/fault_injection.h"
#include "train/finite_checks.h"
#include "train/job_profile.h"
#include "train/output_guard.h"
#include "train/progress.h"
#include "train/resume.h"
#include "train/sample_log.h"
#include "train/settings_agreement.h"
#include "train/setup.h"
#include "train/state_agreement.h"
#include "train/train_step.h"
#ifdef DDP_WITH_CUDA
#include "tensor/cuda/cuda_check.h"
#endif

namespace ddp {
namespace {

// --zero: the same update rule as MakeOptimizer, sharded over DDP's group with shards that follow its
// buckets, and the reduce-scatter hook registered on `ddp` (Note [ZeRO-1]).
absl::StatusOr<std::unique_ptr<ZeroRedundancyOptimizer>> MakeZeroOptimizer(const TrainConfig& config,
                                                                           const std::vector<Tensor>& params,
                                                                           DistributedDataParallel& ddp) {
  ZeroOptions options;
  options.groups = ddp.reducer().bucket_assignment();
  DDP_ASSIGN_OR_RETURN(options.optimizer, ParseZeroInnerOptimizer(config.optimizer));
  options.sgd.lr = options.adam.lr = static_cast<float>(config.lr);
  options.sgd.momentum = static_cast<float>(config.momentum);
  options.sgd.weight_decay = options.adam.weight_decay = static_cast<float>(config.weight_decay);
  DDP_ASSIGN_OR_RETURN(std::unique_ptr<ZeroRedundancyOptimizer> zero,
                       ZeroRedundancyOptimizer::Create(params, &ddp.group(), options));
  DDP_RETURN_IF_ERROR(ddp.RegisterCommHook(MakeZeroReduceScatterHook(*zero)));
  return zero;
}

// Under DDP, rank 0 prints the optimizer-state bytes every rank holds (with --zero each holds its shard).
absl::Status ReportOptimizerMemory(const Optimizer& optimizer, const ZeroRedundancyOptimizer* zero,
                                   ProcessGroup& group) {
  size_t mine = 0;
  if (zero != nullptr) {
    mine = zero->state_bytes();
  } else {
    for (const auto& [key, tensor] : optimizer.StateDict().tensors) mine += tensor.nbytes();
  }
  std::vector<std::string> all;
  DDP_RETURN_IF_ERROR(group.AllGatherObject(absl::StrCat(mine), &all));
  if (group.rank() == 0) {
    std::fprintf(stderr, "optimizer state bytes per rank%s: %s\n", zero != nullptr ? " (ZeRO-1 shards)" : "",
                 absl::StrJoin(all, " ").c_str());
  }
  return absl::OkStatus();
}

// The device this rank trains on: the CPU, or (--device=cuda) GPU LOCAL_RANK (GPU 0 for one process
// and for DataParallel, whose module lives on its first device as in PyTorch). Fails when there is no
// such GPU.
absl::StatusOr<Device> TrainingDevice(const TrainConfig& config, const LaunchEnv& launch) {
  if (config.device == "cpu") return Device::CPU();
#ifdef DDP_WITH_CUDA
  DDP_RETURN_IF_ERROR(cuda::CudaDeviceAvailable());
  const int index = config.mode == "dp" ? 0 : launch.local_rank;
  if (index >= cuda::CudaDeviceCount()) {
    return absl::FailedPreconditionError(absl::StrCat("--device=cuda: local rank ", index, " needs GPU ",
                                                      index, " but this machine has ",
                                                      cuda::CudaDeviceCount()));
  }
  return Device::CUDA(index);
#else
  (void)launch;
  return absl::FailedPreconditionError("--device=cuda needs a CUDA build (bazel build --config=cuda)");
#endif
}

// --mode=dp: DataParallel over config.dp_devices CPU workers or GPUs.
absl::StatusOr<std::shared_ptr<DataParallel>> WrapDataParallel(const TrainConfig& config,
                                                               std::shared_ptr<Module> model, Device device) {
  DataParallelOptions options;
  if (device.is_cuda()) options.device_type = DeviceType::kCUDA;
  for (int i = 0; i < config.dp_devices; ++i) options.device_ids.push_back(i);
  options.kernel_threads_per_worker = config.threads;
  DDP_ASSIGN_OR_RETURN(std::shared_ptr<DataParallel> dp, DataParallel::Create(std::move(model), options));
  std::fprintf(stderr, "DataParallel: %d %s, %d kernel thread(s) each\n", config.dp_devices,
               device.is_cuda() ? "GPUs" : "CPU workers", config.threads);
  return dp;
}

// Every rank evaluates its share of the test set, --eval_batch_size samples at a time (0: --batch_size,
// so that evaluating needs no more memory than training); the result (the same on every rank) equals one
// process's.
absl::StatusOr<EvalResult> EvaluateTestSet(const TrainConfig& config, Module& model, const Dataset& test,
                                           ProcessGroup* group) {
  DistributedEvalOptions options;
  options.batch_size = config.eval_batch_size > 0 ? config.eval_batch_size : config.batch_size;
  options.num_workers = config.num_workers;
  return EvaluateDistributed(model, test, group, options);
}

// The training loader: this rank's DistributedSampler shard in batches of config.batch_size.
absl::StatusOr<std::unique_ptr<DataLoader>> MakeTrainLoader(const TrainConfig& config,
                                                            std::shared_ptr<const Dataset> train, int rank,
                                                            int world) {
  DistributedSamplerOptions sampler_options;
  sampler_options.num_replicas = world;
  sampler_options.rank = rank;
  sampler_options.shuffle = config.shuffle;
  sampler_options.seed = config.seed;
  DDP_ASSIGN_OR_RETURN(std::unique_ptr<DistributedSampler> sampler,
                       DistributedSampler::Create(train->Size(), sampler_options));
  DataLoaderOptions options;
  options.batch_size = config.batch_size;
  options.num_workers = config.num_workers;
  return DataLoader::Create(std::move(train), std::move(sampler), options);
}

// A training set that gives no optimizer step (empty, or fewer batches per rank than --accumulate_steps)
// is an error: the run would report a made-up train_loss and save untrained weights. Every rank's shard
// has the same length (DistributedSampler pads), so every rank decides alike.
absl::Status CheckSomethingToTrain(const TrainConfig& config, const Dataset& train,
                                   const DataLoader& loader) {
  if (train.Size() == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("the training set in ", DataFolder(config), " is empty: nothing to train on"));
  }
  if (loader.NumBatches() < config.accumulate_steps) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the training set in ", DataFolder(config), " (", train.Size(), " samples) gives each rank ",
        loader.NumBatches(), " batch(es) of --batch_size=", config.batch_size, " per epoch, fewer than the ",
        config.accumulate_steps, " one optimizer step takes (--accumulate_steps): nothing to train"));
  }
  return absl::OkStatus();
}

// --eval_only: every rank evaluates the loaded weights; rank 0 reports and appends the --metrics_out
// record (test_loss, test_acc, samples, world_size). An empty test set is an error: there is nothing to
// evaluate.
absl::StatusOr<EvalResult> EvaluateOnly(const TrainConfig& config, Module& model, const Dataset& test,
                                        ProcessGroup* group) {
  if (test.Size() == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--eval_only: the test set in ", DataFolder(config), " is empty: nothing to evaluate"));
  }
  // Each rank evaluates its share of the test set with the weights it loaded: a stale copy of the file on
  // one node would blend into an accuracy that is nobody's.
  if (group != nullptr) {
    const std::string fingerprint = FingerprintText(ModuleStateFingerprint(model));
    DDP_RETURN_IF_ERROR(
        CheckRanksHoldTheSame(*group, "--eval_only: the ranks loaded different weights", fingerprint,
                              absl::StrCat("--init_from=", config.init_from, " (state ", fingerprint, ")")));
  }
  DDP_ASSIGN_OR_RETURN(EvalResult result, EvaluateTestSet(config, model, test, group));
  const int world = group != nullptr ? group->size() : 1;
  DDP_RETURN_IF_ERROR(RunOnRankZero(group, [&]() -> absl::Status {
    std::fprintf(stderr, "eval_only %s: %s over %lld samples on %d rank(s)\n", config.init_from.c_str(),
                 TestMetricsText(config, result).c_str(), static_cast<long long>(result.count), world);
    if (config.metrics_out.empty()) return absl::OkStatus();
    return AppendLine(config.metrics_out,
                      absl::StrFormat("{%s, \"samples\": %lld, \"world_size\": %d}", TestMetricsJson(result),
                                      static_cast<long long>(result.count), world));
  }));
  return result;
}

// Rank 0 writes end-of-run artefacts; every rank takes part in the trace gather and the final barrier.
// `module_tracer` is null unless --trace_out (then its slices join the Reducer's in the trace file).
absl::Status Finish(const TrainConfig& config, const TrainState& state, DistributedDataParallel* ddp,
                    const ModuleTracer* module_tracer, ProcessGroup* group) {
  const Module& model = state.model;
  const bool rank0 = group == nullptr || group->rank() == 0;
  if (!config.save.empty()) {
    // Under DDP rank 0 saves and its error, if any, reaches every rank at once (no rank waits on a
    // barrier that rank 0 will never reach).
    DDP_RETURN_IF_ERROR(RunOnRankZero(group, [&]() -> absl::Status {
      DDP_RETURN_IF_ERROR(RequireFiniteWeights(model, absl::StrCat("not saving --save=", config.save)));
      return SaveModuleWeights(model, config.save);
    }));
  }
  if (ddp != nullptr) {
    if (rank0) std::fprintf(stderr, "%s", FormatStatsTable(ddp->reducer().stats()).c_str());
    DDP_RETURN_IF_ERROR(ReportOptimizerMemory(state.optimizer, state.zero, *group));
    if (!config.trace_out.empty()) {
      std::vector<const TraceRecorder*> recorders = {&ddp->reducer().trace()};
      if (module_tracer != nullptr) recorders.push_back(&module_tracer->trace());
      DDP_RETURN_IF_ERROR(WriteMergedTrace(recorders, *group, config.trace_out));
    }
    DDP_RETURN_IF_ERROR(group->Barrier()->Wait(group->timeout()));
  }
  return absl::OkStatus();
}

// The epochs from `first_epoch` on, each evaluated and reported; returns the last evaluation. When no
// epoch is left to train (a resume at or past --max_steps, or after the last epoch) the resumed weights
// are evaluated instead, so the final result is always a real evaluation.
absl::StatusOr<EvalResult> RunEpochs(const TrainConfig& config, TrainState& state, int first_epoch,
                                     DataLoader& loader, const Dataset& test) {
  std::optional<EvalResult> last;
  const absl::Time start = absl::Now();
  for (int epoch = first_epoch; epoch <= config.epochs; ++epoch) {
    if (config.max_steps > 0 && state.global_step >= config.max_steps) break;
    EpochFigures figures{epoch};
    DDP_ASSIGN_OR_RETURN(figures.stats, TrainEpoch(state, epoch, loader));
    figures.training_peak_rss = PeakRssBytes();
    DDP_ASSIGN_OR_RETURN(last, EvaluateTestSet(config, state.model, test, state.group));
    figures.peak_rss = PeakRssBytes();
    figures.wall_s = absl::ToDoubleSeconds(absl::Now() - start);
    figures.world_size = state.world_size;
    DDP_RETURN_IF_ERROR(ReportEpoch(config, figures, *last, state.group));
  }
  if (last.has_value()) return *last;
  if (state.rank == 0) {
    std::fprintf(stderr,
                 "nothing left to train (step %lld, --max_steps=%lld, --epochs=%d): evaluating the resumed "
                 "weights\n",
                 static_cast<long long>(state.global_step), static_cast<long long>(config.max_steps),
                 config.epochs);
  }
  return EvaluateTestSet(config, state.model, test, state.group);
}

// The optimizer steps of the whole run as `loader` (at its world size, from an epoch's start) gives them:
// what the learning-rate schedule anneals over.
int64_t TotalSteps(const TrainConfig& config, const DataLoader& loader) {
  const int64_t steps_per_epoch = loader.NumBatches() / config.accumulate_steps;
  const int64_t total = steps_per_epoch * config.epochs;
  return config.max_steps > 0 ? std::min(total, config.max_steps) : total;
}

// --elastic: what train/elastic_loop.h needs of Train's objects. The references must outlive the run.
ElasticHooks ElasticTrainerHooks(const TrainConfig& config, TrainState& state,
                                 const std::shared_ptr<Module>& model, Device device,
                                 const std::shared_ptr<const Dataset>& train, const Dataset& test,
                                 std::unique_ptr<DataLoader>& loader,
                                 std::shared_ptr<DistributedDataParallel>& ddp) {
  ElasticHooks hooks;
  hooks.run = [&config, &state, &loader, &test, &ddp](int first_epoch) -> absl::StatusOr<EvalResult> {
    DDP_ASSIGN_OR_RETURN(const EvalResult last, RunEpochs(config, state, first_epoch, *loader, test));
    DDP_RETURN_IF_ERROR(Finish(config, state, ddp.get(), /*module_tracer=*/nullptr, state.group));
    return last;
  };
  hooks.detach = [&state, &loader, &ddp] {
    state.ddp = nullptr;
    ddp.reset();
    loader.reset();
  };
  hooks.attach = [&config, &state, model, device, train, &loader,
                  &ddp](const std::string& bucket_order) -> absl::Status {
    DDP_ASSIGN_OR_RETURN(loader, MakeTrainLoader(config, train, state.rank, state.world_size));
    DDP_ASSIGN_OR_RETURN(const DdpOptions ddp_options, DdpOptionsFor(config));
    DDP_ASSIGN_OR_RETURN(ddp, WrapDdp(config, model, device, state.group, ddp_options));
    if (!bucket_order.empty()) DDP_RETURN_IF_ERROR(ddp->RestoreBucketOrder(bucket_order));
    state.ddp = ddp.get();
    state.total_steps = TotalSteps(config, *loader);
    return absl::OkStatus();
  };
  return hooks;
}

// The training part of RunTraining, after the data and the model: loader, DDP or DataParallel, optimizer,
// --resume, the checkpoint guard (GuardExistingCheckpoints on rank 0), the epochs and the end-of-run
// artefacts.
absl::StatusOr<EvalResult> Train(const TrainConfig& config, const LaunchEnv& launch,
                                 std::shared_ptr<Module> model, Device device, DistributedContext* dist,
                                 std::shared_ptr<ImageDataset> train, const Dataset& test) {
  ProcessGroup* group = dist != nullptr ? dist->group.get() : nullptr;
  const int rank = group != nullptr ? group->rank() : 0;
  const int world = group != nullptr ? group->size() : 1;
  DDP_ASSIGN_OR_RETURN(std::unique_ptr<DataLoader> loader, MakeTrainLoader(config, train, rank, world));
  DDP_RETURN_IF_ERROR(CheckSomethingToTrain(config, *train, *loader));
  std::shared_ptr<DistributedDataParallel> ddp;
  if (group != nullptr && config.mode != "dp") {
    DDP_ASSIGN_OR_RETURN(const DdpOptions ddp_options, DdpOptionsFor(config));
    DDP_ASSIGN_OR_RETURN(ddp, WrapDdp(config, model, device, group, ddp_options));
  }
  // --trace_out: per-module forward/backward slices (ddp/module_trace.h), made after DDP so that its
  // gradient hooks follow the Reducer's; without the flag nothing is traced or measured.
  std::unique_ptr<ModuleTracer> module_tracer;
  if (ddp != nullptr && !config.trace_out.empty())
    module_tracer = std::make_unique<ModuleTracer>(*model, rank);
  // --bucket_cap_mb=auto (Note [Auto bucket caps]): observes from the first forward, runs after each step.
  std::unique_ptr<AutoBucketCaps> auto_caps;
  if (ddp != nullptr && AutoBucketCapsRequested(config)) {
    AutoBucketCapsOptions auto_options;
    auto_options.measure_steps = auto_options.report_steps = config.auto_caps_steps;
    auto_caps = AutoBucketCaps::Attach(*ddp, auto_options, stderr);
  }
  std::shared_ptr<DataParallel> dp;
  if (config.mode == "dp") {
    if (group != nullptr)
      return absl::InvalidArgumentError("--mode=dp runs in one process; start it without ddprun");
    DDP_ASSIGN_OR_RETURN(dp, WrapDataParallel(config, model, device));
  }
  std::unique_ptr<Optimizer> optimizer;
  ZeroRedundancyOptimizer* zero = nullptr;
  if (config.zero && ddp != nullptr) {
    DDP_ASSIGN_OR_RETURN(std::unique_ptr<ZeroRedundancyOptimizer> sharded,
                         MakeZeroOptimizer(config, model->Parameters(), *ddp));
    zero = sharded.get();
    optimizer = std::move(sharded);
  } else {
    DDP_ASSIGN_OR_RETURN(optimizer, MakeOptimizer(config, model->Parameters()));
  }

  TrainState state{config, *model, ddp.get(), *optimizer, rank, world};
  state.train_images = train.get();
  state.zero = zero;
  state.device = device;
  state.dp = dp.get();
  state.group = group;
  state.attempt = launch.restart_count;
  state.fault = FaultInjection{config.fault_inject_step, config.fault_inject_rank, config.fault_inject_point,
                               config.uneven_drop_batches, launch.restart_count};
  DDP_RETURN_IF_ERROR(ParseMoreFaults(config.fault_inject_more, state.fault));
  InstallBackwardFault(state.fault, rank, *model, &state.global_step);
  std::unique_ptr<SampleLog> sample_log;
  if (!config.log_samples.empty()) {
    DDP_ASSIGN_OR_RETURN(sample_log, SampleLog::Open(config.log_samples));
  }
  state.sample_log = sample_log.get();
  state.auto_caps = auto_caps.get();
  const std::unique_ptr<GradScaler> scaler = MakeGradScaler(config);
  state.scaler = scaler.get();
  const std::unique_ptr<AdaptiveThreads> adaptive_threads = AttachAdaptiveThreads(config, state);
  int first_epoch = 1;
  if (config.resume) {
    DDP_ASSIGN_OR_RETURN(first_epoch, ResumeFromNewest(config, state));
  }
  DDP_RETURN_IF_ERROR(RequireFiniteWeights(
      *model, config.resume
                  ? absl::StrCat("cannot train from the checkpoint resumed from ", config.checkpoint_dir)
              : config.init_from.empty() ? std::string("cannot train from the initial weights")
                                         : absl::StrCat("cannot train from --init_from=", config.init_from)));
  DDP_RETURN_IF_ERROR(
      RunOnRankZero(group, [&] { return GuardExistingCheckpoints(config, state.global_step); }));
  state.total_steps = TotalSteps(config, *loader);
  if (config.elastic && group != nullptr) {
    return RunElastic(config, *dist, state, first_epoch,
                      ElasticTrainerHooks(config, state, model, device, train, test, loader, ddp));
  }
  DDP_ASSIGN_OR_RETURN(const EvalResult last, RunEpochs(config, state, first_epoch, *loader, test));
  DDP_RETURN_IF_ERROR(Finish(config, state, ddp.get(), module_tracer.get(), group));
  return last;
}

// --elastic, started by ddprun's elastic mode as a replacement for a lost worker (DDP_ELASTIC_JOIN=1):
// builds the data, model and optimizer as any worker does, but joins no group at start (its RANK is still
// the lost worker's); train/elastic_loop.h admits it into the running job, which hands it the state.
absl::StatusOr<EvalResult> RunReplacement(const TrainConfig& config, const LaunchEnv& launch) {
  InitOptions init;
  init.backend = config.backend;
  DDP_ASSIGN_OR_RETURN(std::unique_ptr<DistributedContext> dist, ConnectWithoutGroup(init));
  if (config.zero) {
    // No replacement can ever join a --zero run, so this one ends the attempt's elastic job
    // (ElasticClosedKey): ddprun then starts no other replacement for the slot while the survivors
    // fall back to the last checkpoint.
    (void)dist->store->Add(ElasticClosedKey(), 1);
    return absl::FailedPreconditionError(
        "a replacement cannot join a --zero run: the lost rank's optimizer shard is gone (docs/elastic.md)");
  }
  DDP_ASSIGN_OR_RETURN(auto test, LoadDataSplit(config, Split::kTest));
  DDP_ASSIGN_OR_RETURN(const Device device, TrainingDevice(config, launch));
  DDP_ASSIGN_OR_RETURN(std::shared_ptr<Module> model, BuildModel(config, device));
  DDP_ASSIGN_OR_RETURN(std::shared_ptr<ImageDataset> train_set, LoadDataSplit(config, Split::kTrain));
  std::shared_ptr<const Dataset> train = train_set;
  const LoadedData loaded = DescribeLoadedData(DataFolder(config), train_set.get(), *test);
  DDP_ASSIGN_OR_RETURN(const bool compared,
                       CheckReplacementFitsJob(*dist->store, ProfileOf(config, loaded), kJobProfileWait));
  if (!compared) std::fprintf(stderr, "%s\n", NoJobProfileNote().c_str());
  DDP_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer, MakeOptimizer(config, model->Parameters()));
  TrainState state{config, *model, nullptr, *optimizer, /*rank=*/-1, /*world_size=*/0};
  state.train_images = train_set.get();
  state.device = device;
  state.fault = FaultInjection{config.fault_inject_step, config.fault_inject_rank, config.fault_inject_point,
                               config.uneven_drop_batches, launch.restart_count};
  DDP_RETURN_IF_ERROR(ParseMoreFaults(config.fault_inject_more, state.fault));
  std::unique_ptr<SampleLog> sample_log;
  if (!config.log_samples.empty()) {
    DDP_ASSIGN_OR_RETURN(sample_log, SampleLog::Open(config.log_samples));
  }
  state.sample_log = sample_log.get();
  const std::unique_ptr<AdaptiveThreads> adaptive_threads = AttachAdaptiveThreads(config, state);
  std::unique_ptr<DataLoader> loader;
  std::shared_ptr<DistributedDataParallel> ddp;
  return RunElasticJoiner(config, *dist, state,
                          ElasticTrainerHooks(config, state, model, device, train, *test, loader, ddp));
}

// A single-process run (no launcher, or WORLD_SIZE=1) ignores the DDP-only flags: say so once.
void WarnIgnoredDdpFlags(const TrainConfig& config) {
  const std::vector<std::string> ignored = DdpOnlyFlagsSet(config);
  if (ignored.empty()) return;
  std::fprintf(stderr,
               "train: warning: %s %s effect only under DDP (WORLD_SIZE > 1, e.g. under ddprun); "
               "ignored in this single-process run\n",
               absl::StrJoin(ignored, ", ").c_str(), ignored.size() == 1 ? "takes" : "take");
}

// --memory_format=auto that turned channels-last activations on: rank 0 says so once, with the flag
// that keeps them NCHW.
void NoteAutoMemoryFormat(const TrainConfig& config, int rank) {
  if (rank != 0 || config.memory_format != "auto" || !ChannelsLastActivations(config)) return;
  std::fprintf(
      stderr,
      "train: resnet18's activations are channels-last (--memory_format=auto under --precision=bf16 on "
      "the CPU; --memory_format=contiguous keeps them NCHW)\n");
}

}  // namespace

absl::StatusOr<EvalResult> RunTraining(const TrainConfig& config) {
  DDP_RETURN_IF_ERROR(ValidateConfig(config));
  SetNumThreads(config.threads);
  DDP_ASSIGN_OR_RETURN(LaunchEnv launch, ResolveLaunchEnv(ProcessEnv()));
  if (config.elastic && IsElasticReplacement(ProcessEnv())) return RunReplacement(config, launch);
  std::unique_ptr<DistributedContext> dist;
  if (launch.world_size > 1) {
    InitOptions init;
    init.backend = config.backend;
    DDP_ASSIGN_OR_RETURN(dist, InitProcessGroup(init));
  }
  ProcessGroup* group = dist != nullptr ? dist->group.get() : nullptr;
  if (group == nullptr) WarnIgnoredDdpFlags(config);
  NoteAutoMemoryFormat(config, launch.rank);
  const bool dp = config.mode == "dp";
  if (const auto warning =
          KernelThreadsWarning(config.threads, dp ? config.dp_devices : launch.local_world_size,
                               dp ? "DataParallel workers" : "local ranks", UsableCpus(), !dp);
      warning && launch.local_rank == 0 && !config.adapt_threads) {
    std::fprintf(stderr, "%s\n", warning->c_str());
  }
  // Before anything else communicates (Note [Train settings agreement]).
  if (group != nullptr) DDP_RETURN_IF_ERROR(CheckSettingsAgree(*group, config));
  // Every output is tried before any work, by rank 0 which writes them all (the trace exists under DDP).
  const bool writes_trace = group != nullptr && config.mode != "dp" && !config.eval_only;
  DDP_RETURN_IF_ERROR(RunOnRankZero(group, [&] { return ProbeRankZeroOutputs(config, writes_trace); }));

  DDP_ASSIGN_OR_RETURN(auto test, LoadDataSplit(config, Split::kTest));
  DDP_ASSIGN_OR_RETURN(const Device device, TrainingDevice(config, launch));
  std::vector<std::string> init_notes;
  DDP_ASSIGN_OR_RETURN(std::shared_ptr<Module> model, BuildModel(config, device, &init_notes));
  if (launch.rank == 0 && !init_notes.empty()) {
    std::fprintf(stderr, "--init_from=%s: %s\n", config.init_from.c_str(),
                 absl::StrJoin(init_notes, "; ").c_str());
  }
  std::shared_ptr<ImageDataset> train;
  if (!config.eval_only) {
    DDP_ASSIGN_OR_RETURN(train, LoadDataSplit(config, Split::kTrain));
  }
  if (group != nullptr) {
    const LoadedData loaded = DescribeLoadedData(DataFolder(config), train.get(), *test);
    DDP_RETURN_IF_ERROR(CheckRanksLoadedTheSameData(*group, loaded));
    if (config.elastic && launch.rank == 0 && dist->store != nullptr) {  // Note [Replacement fit check]
      DDP_RETURN_IF_ERROR(PublishJobProfile(*dist->store, ProfileOf(config, loaded)));
    }
  }
  if (launch.rank == 0) std::fprintf(stderr, "%s\n", DescribeData(config, train.get(), *test).c_str());
  if (config.eval_only) return EvaluateOnly(config, *model, *test, group);
  return Train(config, launch, std::move(model), device, dist.get(), std::move(train), *test);
}

}  // namespace ddp
