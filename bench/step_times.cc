#include "bench/step_times.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/statistics.h"

namespace ddp {

StepTimeSpread SpreadOf(const std::vector<double>& step_ms) {
  const size_t n = step_ms.size();
  double sum = 0;
  for (double ms : step_ms) sum += ms;
  const double mean = sum / static_cast<double>(n);
  double squares = 0;
  for (double ms : step_ms) squares += (ms - mean) * (ms - mean);
  StepTimeSpread spread;
  spread.p50_ms = Percentile(step_ms, 0.5);
  spread.p90_ms = Percentile(step_ms, 0.9);
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
