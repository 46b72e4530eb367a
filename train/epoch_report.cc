#include "train/epoch_report.h"

#include <cstdio>

#include "absl/strings/str_format.h"
#include "base/describe_bytes.h"
#include "ddp/rank_zero.h"
#include "train/output_guard.h"
#include "train/progress.h"
#include "train/setup.h"

namespace ddp {
namespace {

double Mib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

}  // namespace

std::string TestMetricsJson(const EvalResult& eval) {
  if (eval.count == 0) return "\"test_loss\": null, \"test_acc\": null, \"test_acc5\": null";
  return absl::StrFormat("\"test_loss\": %.6f, \"test_acc\": %.6f, \"test_acc5\": %.6f", eval.loss,
                         eval.accuracy, eval.top5_accuracy);
}

std::string TestMetricsText(const TrainConfig& config, const EvalResult& eval) {
  std::string text = absl::StrFormat("test_loss %.4f test_acc %.4f", eval.loss, eval.accuracy);
  if (ModelInputFor(config).num_classes > 10)
    absl::StrAppendFormat(&text, " test_acc5 %.4f", eval.top5_accuracy);
  return text;
}

absl::Status ReportEpoch(const TrainConfig& config, const EpochFigures& f, const EvalResult& eval,
                         ProcessGroup* group) {
  auto report = [&]() -> absl::Status {
    const std::string test =
        eval.count == 0 ? std::string("no test samples, nothing evaluated") : TestMetricsText(config, eval);
    std::fprintf(stderr, "epoch %d: train_loss %.4f %s (%.0f samples/s, %s; peak RSS %s, training %s)\n",
                 f.epoch, f.stats.mean_loss, test.c_str(), f.stats.samples_per_s,
                 FormatDuration(f.wall_s).c_str(), DescribeBytes(f.peak_rss).c_str(),
                 DescribeBytes(f.training_peak_rss).c_str());
    if (config.metrics_out.empty()) return absl::OkStatus();
    return AppendLine(config.metrics_out,
                      absl::StrFormat("{\"epoch\": %d, \"steps\": %d, \"train_loss\": %.6f, %s, "
                                      "\"samples_per_s\": %.1f, \"wall_s\": %.3f, \"world_size\": %d, "
                                      "\"peak_rss_mb\": %.1f, \"training_peak_rss_mb\": %.1f}",
                                      f.epoch, f.stats.steps, f.stats.mean_loss, TestMetricsJson(eval),
                                      f.stats.samples_per_s, f.wall_s, f.world_size, Mib(f.peak_rss),
                                      Mib(f.training_peak_rss)));
  };
  return RunOnRankZero(group, report);
}

}  // namespace ddp
