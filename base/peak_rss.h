// PeakRssBytes: the most resident memory this process has held, as `/usr/bin/time` and the kernel's
// OOM accounting see it.
#ifndef DDP_BASE_PEAK_RSS_H_
#define DDP_BASE_PEAK_RSS_H_

#include <sys/resource.h>

#include <cstdint>

namespace ddp {

// This process's peak resident set size so far, in bytes (getrusage's ru_maxrss, which Linux gives in
// KiB); 0 when it cannot be read. Thread-safe.
inline int64_t PeakRssBytes() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;
}

}  // namespace ddp

#endif  // DDP_BASE_PEAK_RSS_H_
