// NewGlooSubgroup: the Gloo group over a subset of a parent group's ranks that NewGroup
// (comm/new_group.h) builds, for callers that hold a store and a rank themselves (tests with ranks as
// threads, benchmarks).
#ifndef DDP_COMM_GLOO_GLOO_SUBGROUP_H_
#define DDP_COMM_GLOO_GLOO_SUBGROUP_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/gloo/process_group_gloo.h"
#include "store/store.h"

namespace ddp {

// The Gloo subgroup underneath NewGroup, for callers with a store and a rank of their own (tests with
// ranks as threads): `parent_rank` of `parent_size` joins the subgroup `ranks` under the store prefix
// "subgroup_<group_index>" of `store`. Returns nullptr when parent_rank is not in `ranks`. `store` must
// outlive the group.
absl::StatusOr<std::unique_ptr<ProcessGroupGloo>> NewGlooSubgroup(Store& store, int parent_rank, int parent_size,
                                                                  const std::vector<int>& ranks, int64_t group_index,
                                                                  const ProcessGroupGlooOptions& options);

// Pure: OK when `ranks` is a non-empty list of distinct ranks of a group of `parent_size`, else an
// InvalidArgument error naming the list and what is wrong with it.
absl::Status ValidateSubgroupRanks(const std::vector<int>& ranks, int parent_size);

}  // namespace ddp

#endif  // DDP_COMM_GLOO_GLOO_SUBGROUP_H_
