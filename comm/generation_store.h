// The store namespace of one elastic generation's group (comm/elastic_membership.h): a PrefixStore whose
// launcher exit notices (store/store_keys.h: LauncherExitNoticeKey) are read under the members' launch
// ranks, so that the failure reports of a regrouped group (ranks renumbered) name a lost member at once,
// from what ddprun recorded under the rank it started.
#ifndef DDP_COMM_GENERATION_STORE_H_
#define DDP_COMM_GENERATION_STORE_H_

#include <string>
#include <vector>

#include "store/prefix_store.h"

namespace ddp {

class GenerationStore : public PrefixStore {
 public:
  // `base` is the job's namespace (where the launcher writes its notices) and must outlive this store;
  // members[r] is the launch rank of the generation's rank r.
  GenerationStore(std::string prefix, Store* base, std::vector<int> members);

  // As PrefixStore's, except that LauncherExitNoticeKey(r) of a rank r of the generation reads
  // LauncherExitNoticeKey(members[r]) of `base`.
  absl::StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout) override;

 private:
  Store* const base_;
  const std::vector<int> members_;
};

}  // namespace ddp

#endif  // DDP_COMM_GENERATION_STORE_H_
