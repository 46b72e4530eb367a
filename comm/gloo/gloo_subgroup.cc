#include "comm/gloo/gloo_subgroup.h"

#include <algorithm>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "store/prefix_store.h"
#include "base/check.h"

namespace ddp {

absl::Status ValidateSubgroupRanks(const std::vector<int>& ranks, int parent_size) {
  const std::string list = absl::StrCat("[", absl::StrJoin(ranks, ", "), "]");
  if (ranks.empty()) return absl::InvalidArgumentError("NewGroup: the rank list [] is empty");
  std::set<int> seen;
  for (int r : ranks) {
    if (r < 0 || r >= parent_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("NewGroup: rank ", r, " of the list ", list, " is outside the group of ", parent_size));
    }
    if (!seen.insert(r).second) {
      return absl::InvalidArgumentError(absl::StrCat("NewGroup: rank ", r, " appears twice in the list ", list));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ProcessGroupGloo>> NewGlooSubgroup(Store& store, int parent_rank, int parent_size,
                                                                  const std::vector<int>& ranks, int64_t group_index,
                                                                  const ProcessGroupGlooOptions& options) {
  DDP_RETURN_IF_ERROR(ValidateSubgroupRanks(ranks, parent_size));
  const auto position = std::find(ranks.begin(), ranks.end(), parent_rank);
  if (position == ranks.end()) return std::unique_ptr<ProcessGroupGloo>();
  const int rank = static_cast<int>(position - ranks.begin());
  auto prefixed = std::make_unique<PrefixStore>(absl::StrCat("subgroup_", group_index), &store);
  absl::StatusOr<std::unique_ptr<ProcessGroupGloo>> group =
      ProcessGroupGloo::CreateOwningStore(std::move(prefixed), rank, static_cast<int>(ranks.size()), options);
  if (!group.ok()) {
    return absl::Status(group.status().code(),
                        absl::StrCat("NewGroup #", group_index, " [", absl::StrJoin(ranks, ", "), "] on rank ",
                                     parent_rank, " (subgroup rank ", rank, "): ", group.status().message()));
  }
  return group;
}

}  // namespace ddp
