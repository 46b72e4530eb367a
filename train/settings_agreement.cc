// Note [Train settings agreement]: ranks started by hand (or by a wrapper script) can get different
// flags. Nothing else notices in time: a flag that changes which collectives run (--sync_bn adds three
// all-reduces per layer and step, --zero an all-gather per step, --eval_only skips training, a trace
// gather at the end) leaves the ranks waiting in different collectives until the timeout, or a backend
// crashes on buffers of different sizes; a flag that changes only the numbers (--lr, --seed) trains
// replicas that drift apart; an output flag given to one rank only is silently ignored (rank 0 writes
// every output). So every rank sends its settings in one exchange, before the first other collective
// (and before DDP's own wrap-time check, whose names are DDP's options, not the flags), and a
// difference is named by its flag. What the ranks load (weights, checkpoints) is checked where it is
// loaded (train/state_agreement.h); the per-epoch step count without --join in the step loop.
#include "train/settings_agreement.h"

#include <charconv>
#include <string>

#include "absl/strings/str_cat.h"

namespace ddp {
namespace {

std::string Bool(bool value) { return value ? "true" : "false"; }

// The shortest text that reads back as exactly `value` ("0.01", "1e+30"): two values that differ in any
// bit differ as text (absl::StrCat keeps six digits), and equal values print alike.
std::string Exact(double value) {
  char text[32];
  const std::to_chars_result result = std::to_chars(text, text + sizeof(text), value);
  return std::string(text, result.ptr);
}
std::string Given(const std::string& value) { return value.empty() ? "not given" : "given"; }

// The flags that decide which collectives a training run issues, or which numbers it computes.
void AddTrainingFlags(const TrainConfig& c, std::vector<AgreedField>* fields) {
  const std::vector<AgreedField> training = {
      {"--epochs", absl::StrCat(c.epochs)},
      {"--batch_size", absl::StrCat(c.batch_size)},
      {"--accumulate_steps", absl::StrCat(c.accumulate_steps)},
      {"--max_steps", absl::StrCat(c.max_steps)},
      {"--optimizer", c.optimizer},
      {"--zero", Bool(c.zero)},
      {"--elastic", Bool(c.elastic)},
      {"--lr", Exact(c.lr)},
      {"--momentum", Exact(c.momentum)},
      {"--weight_decay", Exact(c.weight_decay)},
      {"--lr_schedule", c.lr_schedule},
      {"--warmup_steps", absl::StrCat(c.warmup_steps)},
      {"--clip_grad_norm", Exact(c.clip_grad_norm)},
      {"--seed", absl::StrCat(c.seed)},
      {"--shuffle", Bool(c.shuffle)},
      {"--random_crop_padding", absl::StrCat(c.random_crop_padding)},
      {"--random_flip", Bool(c.random_flip)},
      {"--sync_bn", Bool(c.sync_bn)},
      {"--join", Bool(c.join)},
      {"--bucket_cap_mb", AutoBucketCapsRequested(c) ? c.bucket_cap_mb : Exact(BucketCapMiB(c))},
      {"--auto_caps_steps", absl::StrCat(c.auto_caps_steps)},
      {"--first_bucket_mb", Exact(c.first_bucket_mb)},
      {"--find_unused_parameters", Bool(c.find_unused_parameters)},
      {"--static_graph", Bool(c.static_graph)},
      {"--grad_as_bucket_view", Bool(c.grad_as_bucket_view)},
      {"--comm_hook", c.comm_hook},
      {"--precision", c.precision},
      {"--memory_format", ResolvedMemoryFormat(c)},
      {"--reduce_dtype", c.reduce_dtype},
      {"--grad_scaler", GradScalerEnabled(c) ? absl::StrCat("on (", Exact(c.grad_scaler_init_scale), " x",
                                                            Exact(c.grad_scaler_growth_factor), " /",
                                                            Exact(c.grad_scaler_backoff_factor), " every ",
                                                            c.grad_scaler_growth_interval, ")")
                                             : std::string("off")},
      {"--powersgd_rank", absl::StrCat(c.powersgd_rank)},
      {"--powersgd_start_iter", absl::StrCat(c.powersgd_start_iter)},
      {"--powersgd_min_compression_rate", Exact(c.powersgd_min_compression_rate)},
      {"--no_rebuild_buckets", Bool(c.no_rebuild_buckets)},
      {"--uneven_drop_batches", absl::StrCat(c.uneven_drop_batches)},
      {"--check_sync_every", absl::StrCat(c.check_sync_every)},
      {"--checkpoint_every", absl::StrCat(c.checkpoint_every)},
      {"--resume", Bool(c.resume)},
      {"--overwrite_checkpoints", Bool(c.overwrite_checkpoints)},
  };
  fields->insert(fields->end(), training.begin(), training.end());
}

}  // namespace

std::vector<AgreedField> SettingsToAgree(const TrainConfig& c) {
  std::vector<AgreedField> fields = {
      {"--eval_only", Bool(c.eval_only)},
      {"--model", c.model},
      {"--dataset", c.dataset},
      {"--device", c.device},
  };
  if (!c.eval_only) AddTrainingFlags(c, &fields);
  const std::vector<AgreedField> given = {
      {"--init_from", Given(c.init_from)},           {"--save", Given(c.save)},
      {"--dump_grads", Given(c.dump_grads)},         {"--metrics_out", Given(c.metrics_out)},
      {"--trace_out", Given(c.trace_out)},           {"--log_samples", Given(c.log_samples)},
      {"--checkpoint_dir", Given(c.checkpoint_dir)}, {"--init_from_exclude", c.init_from_exclude},
  };
  fields.insert(fields.end(), given.begin(), given.end());
  return fields;
}

absl::Status CheckSettingsAgree(ProcessGroup& group, const TrainConfig& config) {
  return CheckRanksAgree(group, SettingsToAgree(config), "train/train settings");
}

}  // namespace ddp
