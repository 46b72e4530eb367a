#include "bench/step_times.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ddp {

StepTimeSpread SpreadOf(std::vector<double> step_ms) {
  std::sort(step_ms.begin(), step_ms.end());
  const size_t n = step_ms.size();
  // Nearest rank: the smallest value with at least p% of the values at or below it.
  auto percentile = [&](double p) {
    const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(n)));
    return step_ms[std::max<size_t>(rank, 1) - 1];
  };
  double sum = 0;
  for (double ms : step_ms) sum += ms;
  const double mean = sum / static_cast<double>(n);
  double squares = 0;
  for (double ms : step_ms) squares += (ms - mean) * (ms - mean);
  StepTimeSpread spread;
  spread.p50_ms = percentile(50);
  spread.p90_ms = percentile(90);
  spread.cv = std::sqrt(squares / static_cast<double>(n)) / mean;
  return spread;
}

absl::Status WriteStepTimes(const std::string& path, const std::vector<double>& step_ms) {
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write step times to ", path, ": ", std::strerror(errno)));
  }
  bool ok = true;
  for (double ms : step_ms) ok = ok && std::fprintf(file, "%.4f\n", ms) > 0;
  ok = std::fclose(file) == 0 && ok;
  if (!ok) return absl::DataLossError(absl::StrCat("writing step times to ", path, " failed"));
  return absl::OkStatus();
}

}  // namespace ddp
