#include "train/train_config.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/check.h"
#include "data/image_dataset_catalog.h"

namespace ddp {
namespace {

// The rules that involve more than one flag, or the build.
absl::Status CheckCombinations(const TrainConfig& config) {
  auto bad = [](const char* message) { return absl::InvalidArgumentError(message); };
#ifndef DDP_WITH_CUDA
  if (config.device == "cuda") return bad("--device=cuda needs a CUDA build (bazel build --config=cuda)");
#endif
  if (config.backend == "nccl" && config.device != "cuda") return bad("--backend=nccl needs --device=cuda");
  if (const absl::StatusOr<ImageDatasetInfo> data = FindImageDataset(config.dataset);
      data.ok() && data->default_dir.empty() && config.data_dir.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--dataset=", config.dataset,
                                                   " has no default folder: pass ",
                                                   "--data_dir=<the folder that holds ", data->files, ">"));
  }
  if (config.adapt_threads && config.mode == "dp") {
    return bad("--adapt_threads runs in the step loop's thread; --mode=dp's workers keep --threads each");
  }
  if (GradScalerEnabled(config) && config.zero) {
    return bad(
        "--grad_scaler (on by default with --precision=fp16) cannot be combined with --zero (each rank "
        "holds a shard of the gradients)");
  }
  if (config.memory_format == "channels_last" && (config.model != "resnet18" || config.device != "cpu")) {
    return bad(
        "--memory_format=channels_last runs resnet18 on the CPU (the other models and the GPU kernels take "
        "contiguous NCHW activations)");
  }
  if (config.grad_scaler_backoff_factor <= 0) return bad("--grad_scaler_backoff_factor must be > 0");
  if (config.reduce_dtype != "fp32" && (config.comm_hook != "none" || config.zero || config.grad_as_bucket_view)) {
    return bad("--reduce_dtype=bf16 puts the gradients into bf16 buckets itself: it cannot be combined with "
               "--comm_hook (fp16/bf16 would convert a second time; powersgd takes float32), --zero (its own "
               "reduce-scatter hook) or --grad_as_bucket_view (a float32 .grad cannot view a bf16 bucket)");
  }
  if (config.uneven_drop_batches > 0 && (config.checkpoint_every > 0 || config.check_sync_every > 0)) {
    return bad("--uneven_drop_batches cannot be combined with --checkpoint_every or --check_sync_every (their "
               "per-step collectives need every rank at every step)");
  }
  if ((config.resume || config.checkpoint_every > 0) && config.checkpoint_dir.empty()) {
    return bad("--resume and --checkpoint_every need --checkpoint_dir");
  }
  if (config.eval_only && config.init_from.empty()) return bad("--eval_only needs --init_from=WEIGHTS");
  if (!config.init_from_exclude.empty() && (config.init_from.empty() || config.eval_only)) {
    return bad(
        "--init_from_exclude leaves some of --init_from's tensors out: it needs --init_from, and not "
        "--eval_only (which would evaluate initial weights)");
  }
  if (double cap = 0; !AutoBucketCapsRequested(config) &&
                      (!absl::SimpleAtod(config.bucket_cap_mb, &cap) || !(cap >= 0) || std::isinf(cap))) {
    return absl::InvalidArgumentError(absl::StrCat("--bucket_cap_mb must be a number >= 0 (MiB) or auto, got \"",
                                                   config.bucket_cap_mb, "\""));
  }
  if (AutoBucketCapsRequested(config) &&
      (config.zero || config.comm_hook == "powersgd" || config.uneven_drop_batches > 0)) {
    return bad("--bucket_cap_mb=auto rebuilds the buckets mid-run after collectives on every rank: it cannot "
               "be combined with --zero (shards follow the buckets), --comm_hook=powersgd (state per bucket) "
               "or --uneven_drop_batches (a rank that ran out of data would miss them)");
  }
  if (config.zero && (config.device != "cpu" || config.mode == "dp" || config.uneven_drop_batches > 0)) {
    return bad("--zero needs --device=cpu, DDP (not --mode=dp) and even inputs (no --uneven_drop_batches): every "
               "rank all-gathers the parameters at every step");
  }
  if (config.zero && (config.comm_hook != "none" || !config.dump_grads.empty())) {
    return bad("--zero brings its own reduce-scatter comm hook (ddp/zero_reduce_scatter_hook.h): it cannot be "
               "combined with --comm_hook, and --dump_grads would see unreduced gradients outside each shard");
  }
  if (config.elastic && (config.mode == "dp" || config.device != "cpu" || AutoBucketCapsRequested(config) ||
                         !config.trace_out.empty() || config.sync_bn || config.uneven_drop_batches > 0 ||
                         config.comm_hook == "powersgd")) {
    return bad("--elastic rebuilds the group, DDP and the data loader after a lost rank: it needs DDP on the CPU, "
               "and cannot be combined with --mode=dp, --device=cuda, --bucket_cap_mb=auto, --trace_out, "
               "--sync_bn, --uneven_drop_batches or --comm_hook=powersgd (state tied to the old group)");
  }
  if (config.elastic_join_at_step > 0 && !config.elastic) {
    return bad("--elastic_join_at_step says when a replacement joins an elastic run: it needs --elastic");
  }
  return absl::OkStatus();
}

}  // namespace

FlagRule::FlagRule(Kind kind, double low, double high, std::vector<std::string> choices)
    : kind_(kind), low_(low), high_(high), choices_(std::move(choices)) {}

FlagRule FlagRule::Any() { return FlagRule(Kind::kAny); }
FlagRule FlagRule::AtLeast(double bound) { return FlagRule(Kind::kAtLeast, bound); }
FlagRule FlagRule::Above(double bound) { return FlagRule(Kind::kAbove, bound); }
FlagRule FlagRule::InRange(double low, double high) { return FlagRule(Kind::kInRange, low, high); }
FlagRule FlagRule::Between(double low, double high) { return FlagRule(Kind::kBetween, low, high); }
FlagRule FlagRule::OneOf(std::vector<std::string> choices) {
  return FlagRule(Kind::kOneOf, 0, 0, std::move(choices));
}

bool FlagRule::Accepts(double value) const {
  switch (kind_) {
    case Kind::kAny:
      return true;
    case Kind::kAtLeast:
      return value >= low_;
    case Kind::kAbove:
      return value > low_;
    case Kind::kInRange:
      return value >= low_ && value < high_;
    case Kind::kBetween:
      return value >= low_ && value <= high_;
    case Kind::kOneOf:
      return false;
  }
  return false;
}

bool FlagRule::Accepts(const std::string& value) const {
  if (kind_ == Kind::kAny) return true;
  return kind_ == Kind::kOneOf && std::find(choices_.begin(), choices_.end(), value) != choices_.end();
}

std::string FlagRule::Failure(const std::string& got) const {
  std::string requirement;
  switch (kind_) {
    case Kind::kAny:
      break;
    case Kind::kAtLeast:
      requirement = absl::StrCat(">= ", low_);
      break;
    case Kind::kAbove:
      requirement = absl::StrCat("> ", low_);
      break;
    case Kind::kInRange:
      requirement = absl::StrCat("in [", low_, ", ", high_, ")");
      break;
    case Kind::kBetween:
      requirement = absl::StrCat("in [", low_, ", ", high_, "]");
      break;
    case Kind::kOneOf:
      requirement = choices_.size() < 2 ? absl::StrJoin(choices_, "")
                                        : absl::StrCat(absl::StrJoin(choices_.begin(), choices_.end() - 1, ", "),
                                                       " or ", choices_.back());
      break;
  }
  return absl::StrCat("must be ", requirement, ", got ", got);
}

absl::Status ValidateConfig(const TrainConfig& config) {
  // One check per row of the table, in its order.
#define DDP_TRAIN_FLAG(type, name, default_value, rule, help)                       \
  if (std::string problem = FlagRule::rule.Check(config.name); !problem.empty()) { \
    return absl::InvalidArgumentError(absl::StrCat("--" #name " ", problem));      \
  }
#include "train/train_flags.def"
#undef DDP_TRAIN_FLAG
  return CheckCombinations(config);
}

bool AutoBucketCapsRequested(const TrainConfig& config) { return config.bucket_cap_mb == "auto"; }

double BucketCapMiB(const TrainConfig& config) {
  double cap = 25;  // auto starts from PyTorch's default
  if (!AutoBucketCapsRequested(config)) {
    DDP_CHECK(absl::SimpleAtod(config.bucket_cap_mb, &cap))
        << "unvalidated --bucket_cap_mb " << config.bucket_cap_mb;
  }
  return cap;
}

bool GradScalerEnabled(const TrainConfig& config) {
  return config.grad_scaler == "on" || (config.grad_scaler == "auto" && config.precision == "fp16");
}

std::string ResolvedMemoryFormat(const TrainConfig& config) {
  return ChannelsLastActivations(config) ? "channels_last" : "contiguous";
}

bool ChannelsLastActivations(const TrainConfig& config) {
  return config.memory_format == "channels_last" ||
         (config.memory_format == "auto" && config.model == "resnet18" && config.precision == "bf16" &&
          config.device == "cpu");
}

std::vector<std::string> DdpOnlyFlagsSet(const TrainConfig& config) {
  const TrainConfig defaults;
  std::vector<std::string> set;
  auto check = [&](const char* name, bool differs) {
    if (differs) set.push_back(absl::StrCat("--", name));
  };
  check("backend", config.backend != defaults.backend);
  check("bucket_cap_mb", config.bucket_cap_mb != defaults.bucket_cap_mb);
  check("first_bucket_mb", config.first_bucket_mb != defaults.first_bucket_mb);
  check("auto_caps_steps", config.auto_caps_steps != defaults.auto_caps_steps);
  check("find_unused_parameters", config.find_unused_parameters != defaults.find_unused_parameters);
  check("static_graph", config.static_graph != defaults.static_graph);
  check("grad_as_bucket_view", config.grad_as_bucket_view != defaults.grad_as_bucket_view);
  check("comm_hook", config.comm_hook != defaults.comm_hook);
  check("reduce_dtype", config.reduce_dtype != defaults.reduce_dtype);
  check("powersgd_rank", config.powersgd_rank != defaults.powersgd_rank);
  check("powersgd_start_iter", config.powersgd_start_iter != defaults.powersgd_start_iter);
  check("powersgd_min_compression_rate",
        config.powersgd_min_compression_rate != defaults.powersgd_min_compression_rate);
  check("no_rebuild_buckets", config.no_rebuild_buckets != defaults.no_rebuild_buckets);
  check("print_buckets", config.print_buckets != defaults.print_buckets);
  check("trace_out", config.trace_out != defaults.trace_out);
  check("sync_bn", config.sync_bn != defaults.sync_bn);
  check("join", config.join != defaults.join);
  check("uneven_drop_batches", config.uneven_drop_batches != defaults.uneven_drop_batches);
  check("check_sync_every", config.check_sync_every != defaults.check_sync_every);
  check("zero", config.zero != defaults.zero);
  check("elastic", config.elastic != defaults.elastic);
  check("elastic_join_at_step", config.elastic_join_at_step != defaults.elastic_join_at_step);
  return set;
}

}  // namespace ddp
