// Note [Non-finite loss]: once the loss is NaN or infinite, every later step trains on garbage: the
// gradients are NaN, DDP averages them into every replica, and the run used to go on for the rest of the
// epoch before an evaluation failed (or saved NaN weights). Each rank therefore looks at its loss after
// each step (a comparison; the loss is on the host already). Stopping must be agreed, or the ranks that
// did not see it would wait for the one that stopped: a tripped watch rides on the stop agreement
// (train/stop_agreement.h) as a request to stop, so every rank stops after the same step at no extra
// cost per step (the request goes into the next step's exchange, one step later), and after the loop
// one exchange (AgreeLossesFinite) tells every rank which rank saw what, so all fail with the same error
// naming the first bad step. Checkpoints and --save refuse weights that are not finite
// (RequireFiniteWeights), so a bad step between the loss and the agreement cannot be saved either.
#include "train/finite_checks.h"

#include <cmath>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "tensor/ops.h"

namespace ddp {

void LossWatch::Observe(int64_t step, double loss, int rank) {
  if (tripped()) return;
  if (std::isfinite(loss)) {
    good_step_ = step;
    good_loss_ = loss;
    return;
  }
  bad_step_ = step;
  bad_loss_ = loss;
  bad_rank_ = rank;
}

absl::Status LossWatch::Error(const TrainConfig& config, int world_size) const {
  std::string cause;
  if (bad_step_ == start_step_ + 1) {
    cause = absl::StrCat("it is this run's first step, before any update, so the weights it started from (",
                         config.init_from.empty() ? "" : absl::StrCat("--init_from=", config.init_from, ", "),
                         config.resume ? "the resumed checkpoint, " : "", "finite) overflow on this data");
  } else {
    cause = absl::StrCat("the learning rate is likely too high (--lr=", config.lr,
                         good_step_ > 0
                             ? absl::StrFormat("; the loss was %.4f at step %d", good_loss_, good_step_)
                             : std::string(),
                         "): lower it, or add --warmup_steps or --clip_grad_norm");
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "the training loss is ", bad_loss_, " at step ", bad_step_,
      world_size > 1 ? absl::StrCat(" (rank ", bad_rank_, "), so training stopped on every rank: ")
                     : std::string(", so training stopped: "),
      cause));
}

std::string LossWatch::Encode() const {
  if (!tripped()) return "";
  return absl::StrFormat("%d %d %.17g %d %d %.17g", start_step_, bad_step_, bad_loss_, bad_rank_, good_step_,
                         good_loss_);
}

absl::Status LossWatch::Decode(const std::string& text, LossWatch* watch) {
  *watch = LossWatch(0);
  if (text.empty()) return absl::OkStatus();
  const std::vector<std::string> parts = absl::StrSplit(text, ' ');
  bool ok = parts.size() == 6;
  ok = ok && absl::SimpleAtoi(parts[0], &watch->start_step_) &&
       absl::SimpleAtoi(parts[1], &watch->bad_step_) && absl::SimpleAtoi(parts[3], &watch->bad_rank_) &&
       absl::SimpleAtoi(parts[4], &watch->good_step_) && absl::SimpleAtod(parts[5], &watch->good_loss_);
  // SimpleAtod reads "nan" and "inf", which is what a non-finite loss prints as.
  ok = ok && absl::SimpleAtod(parts[2], &watch->bad_loss_) && watch->bad_step_ > 0;
  if (!ok) return absl::DataLossError(absl::StrCat("a malformed loss report \"", text, "\""));
  return absl::OkStatus();
}

absl::Status AgreeLossesFinite(ProcessGroup* group, const TrainConfig& config, const LossWatch& watch) {
  if (group == nullptr) return watch.tripped() ? watch.Error(config, 1) : absl::OkStatus();
  std::vector<std::string> all;
  const absl::Status exchange = group->AllGatherObject(watch.Encode(), &all);
  if (!exchange.ok()) {
    return absl::Status(exchange.code(),
                        absl::StrCat("agreeing that the losses were finite: ", exchange.message()));
  }
  const LossWatch* first = nullptr;
  std::vector<LossWatch> watches(all.size(), LossWatch(0));
  for (size_t r = 0; r < all.size(); ++r) {
    absl::Status decoded = LossWatch::Decode(all[r], &watches[r]);
    if (!decoded.ok()) return absl::DataLossError(absl::StrCat("rank ", r, " sent ", decoded.message()));
    if (watches[r].tripped() && (first == nullptr || watches[r].bad_step() < first->bad_step()))
      first = &watches[r];
  }
  return first == nullptr ? absl::OkStatus() : first->Error(config, group->size());
}

std::string FirstNonFiniteTensor(const Module& module) {
  for (const auto& [name, tensor] : module.StateDict()) {
    if (tensor.dtype() == DType::kInt64) continue;
    Tensor host = ToDevice(tensor, Device::CPU());
    host = tensor.dtype() == DType::kFloat32 ? Contiguous(host) : ToDType(host, DType::kFloat32);
    const float* data = host.data<float>();
    for (int64_t i = 0; i < host.numel(); ++i) {
      if (!std::isfinite(data[i])) return name;
    }
  }
  return "";
}

absl::Status RequireFiniteWeights(const Module& module, absl::string_view what) {
  const std::string bad = FirstNonFiniteTensor(module);
  if (bad.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(what, ": the weights hold NaN or infinity (", bad, ")"));
}

}  // namespace ddp
