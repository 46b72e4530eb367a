#include "train/progress.h"

#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_format.h"

namespace ddp {

std::string FormatDuration(double seconds) {
  if (seconds < 60) return absl::StrFormat("%.1fs", seconds);
  const int64_t s = static_cast<int64_t>(seconds);
  if (s < 3600) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%dh%02dm", s / 3600, (s % 3600) / 60);
}

ProgressReporter::ProgressReporter(FILE* out, std::string label, int64_t total_steps, int64_t plain_every)
    : out_(out),
      label_(std::move(label)),
      total_steps_(total_steps),
      plain_every_(std::max<int64_t>(plain_every, 1)),
      is_terminal_(out != nullptr && isatty(fileno(out)) != 0),
      start_(absl::Now()),
      last_draw_(absl::InfinitePast()) {}

double ProgressReporter::samples_per_second() const {
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - start_);
  return elapsed > 0 ? samples_ / elapsed : 0.0;
}

void ProgressReporter::Step(int64_t samples, double loss) {
  ++steps_;
  samples_ += samples;
  loss_sum_ += loss;
  last_loss_ = loss;
  if (is_terminal_) {
    const absl::Time now = absl::Now();
    if (now - last_draw_ >= absl::Milliseconds(100) || steps_ == total_steps_) {
      last_draw_ = now;
      Print(false);
    }
  } else if (steps_ % plain_every_ == 0) {
    Print(false);
  }
}

void ProgressReporter::Finish() {
  if (is_terminal_) {
    Print(true);
  } else if (steps_ % plain_every_ != 0) {
    Print(true);
  }
}

void ProgressReporter::Print(bool final_line) {
  if (out_ == nullptr) return;
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - start_);
  const double rate = samples_per_second();
  const double eta = steps_ > 0 ? elapsed / steps_ * std::max<int64_t>(total_steps_ - steps_, 0) : 0.0;
  std::string text = absl::StrFormat("%s step %d/%d loss %.4f (mean %.4f) %.0f samples/s", label_, steps_,
                                     total_steps_, last_loss_, mean_loss(), rate);
  if (is_terminal_) {
    const int width = 24;
    const int filled = total_steps_ > 0 ? static_cast<int>(width * steps_ / total_steps_) : width;
    std::string bar(filled, '#');
    bar.resize(width, '.');
    std::fprintf(out_, "\r[%s] %s ETA %s  ", bar.c_str(), text.c_str(), FormatDuration(eta).c_str());
    if (final_line) std::fprintf(out_, "\n");
  } else {
    std::fprintf(out_, "%s ETA %s\n", text.c_str(), FormatDuration(eta).c_str());
  }
  std::fflush(out_);
}

}  // namespace ddp
