// Order statistics of measured samples, shared by the Reducer's statistics, the simulator's fits,
// --bucket_cap_mb=auto and the benchmarks, so that "the median" means one thing everywhere.
#ifndef DDP_BASE_STATISTICS_H_
#define DDP_BASE_STATISTICS_H_

#include <vector>

namespace ddp {

// The median of `values`: the middle element of the sorted values, or the mean of the middle pair for an
// even count. 0 for no values.
double Median(std::vector<double> values);

// The q-quantile of `values` (0 <= q <= 1): the element at index round(q * (n - 1)) of the sorted values
// (q = 0.5 of an even count: the upper of the middle pair). 0 for no values.
double Percentile(std::vector<double> values, double q);

}  // namespace ddp

#endif  // DDP_BASE_STATISTICS_H_
