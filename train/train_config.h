// The configuration of train/train: TrainConfig, whose fields are the rows of the flag table
// train/train_flags.def (name, type, default, rule, help: a flag is added or changed there, once),
// and ValidateConfig, which checks a configuration against the table's rules and the rules that
// involve several flags.
#ifndef DDP_TRAIN_TRAIN_CONFIG_H_
#define DDP_TRAIN_TRAIN_CONFIG_H_

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ddp {

// Everything train/train's flags set: one field per row of train/train_flags.def, named as the
// flag, with its default (the documented hyper-parameters, docs/train.md). Plain data; copy freely.
struct TrainConfig {
#define DDP_TRAIN_FLAG(type, name, default_value, rule, help) type name = default_value;
#include "train/train_flags.def"
#undef DDP_TRAIN_FLAG
};

// What one flag's value must be (the `rule` column of train/train_flags.def). A numeric rule on a
// string flag, or OneOf on a number, rejects every value. Immutable; thread-safe.
class FlagRule {
 public:
  static FlagRule Any();                                     // every value
  static FlagRule AtLeast(double bound);                     // ">= bound"
  static FlagRule Above(double bound);                       // "> bound"
  static FlagRule InRange(double low, double high);          // "in [low, high)"
  static FlagRule Between(double low, double high);          // "in [low, high]"
  static FlagRule OneOf(std::vector<std::string> choices);  // "a, b or c"

  // "" when `value` meets the rule, else "must be <requirement>, got <value>" (a string value quoted),
  // e.g. "must be >= 1, got 0". NaN meets no numeric rule but Any().
  template <typename T>
  std::string Check(const T& value) const {
    if constexpr (std::is_same_v<T, std::string>) {
      return Accepts(value) ? "" : Failure(absl::StrCat("\"", value, "\""));
    } else if constexpr (std::is_same_v<T, bool>) {
      return Accepts(value ? 1.0 : 0.0) ? "" : Failure(value ? "true" : "false");
    } else {
      return Accepts(static_cast<double>(value)) ? "" : Failure(absl::StrCat(value));
    }
  }

 private:
  enum class Kind { kAny, kAtLeast, kAbove, kInRange, kBetween, kOneOf };
  explicit FlagRule(Kind kind, double low = 0, double high = 0, std::vector<std::string> choices = {});

  bool Accepts(double value) const;
  bool Accepts(const std::string& value) const;
  std::string Failure(const std::string& got) const;

  Kind kind_;
  double low_, high_;
  std::vector<std::string> choices_;
};

// OK, or InvalidArgument naming the first bad flag: each flag against its rule, in table order
// ("--batch_size must be >= 1, got 0"), then the rules that involve several flags or the build
// ("--backend=nccl needs --device=cuda", "--eval_only needs --init_from=WEIGHTS").
absl::Status ValidateConfig(const TrainConfig& config);

// Whether dynamic loss scaling runs: --grad_scaler=on, or auto with --precision=fp16. Pure.
bool GradScalerEnabled(const TrainConfig& config);

// Whether resnet18 keeps its activations channels-last: --memory_format=channels_last, or auto for resnet18
// under --precision=bf16 on the CPU, where oneDNN's bf16 convolutions then run with no layout conversions
// (faster on every CPU measured, docs/mixed_precision.md "Channels-last activations"). Float32 and fp16
// stay contiguous under auto, as in PyTorch. Pure.
bool ChannelsLastActivations(const TrainConfig& config);
// The layout --memory_format resolves to, as the flag names it: "channels_last" or "contiguous". Pure.
std::string ResolvedMemoryFormat(const TrainConfig& config);

// Whether --bucket_cap_mb=auto (train/auto_bucket_caps.h) asks DDP to choose its own caps.
bool AutoBucketCapsRequested(const TrainConfig& config);
// The bucket cap in MiB that --bucket_cap_mb names; with auto, the caps the run starts with (25).
// REQUIRES: ValidateConfig(config) is OK.
double BucketCapMiB(const TrainConfig& config);

// The DDP-only flags (--backend, --bucket_cap_mb, --trace_out, --comm_hook, ...) that `config` sets to
// something other than their default, as "--name" in table order. A single-process run ignores them;
// RunTraining warns once, naming them. Pure.
std::vector<std::string> DdpOnlyFlagsSet(const TrainConfig& config);

}  // namespace ddp

#endif  // DDP_TRAIN_TRAIN_CONFIG_H_
