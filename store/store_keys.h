// Store keys shared between the launcher (launch/launcher.h) and the process groups it starts, so both
// sides agree on them.
#ifndef DDP_STORE_STORE_KEYS_H_
#define DDP_STORE_STORE_KEYS_H_

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace ddp {

// The PrefixStore prefix (store/prefix_store.h) under which restart attempt `attempt` (DDP_RESTART_COUNT)
// of InitProcessGroup's group rendezvouses: "default_pg/attempt<attempt>". A restarted group meets in a
// fresh namespace because the launcher's store outlives attempts and still holds the previous attempt's
// keys. Write into the namespace through a PrefixStore with this prefix, so both sides agree.
inline std::string DefaultGroupStorePrefix(absl::string_view attempt) {
  return absl::StrCat("default_pg/attempt", attempt);
}

// Within a group's namespace: where the launcher records how a worker of the group exited before the
// group was stopped (e.g. "exit code 137 (signal 9)"), read by FailureReports (comm/failure_reports.h).
inline std::string LauncherExitNoticeKey(int rank) { return absl::StrCat("launcher/exit/", rank); }

// Within the namespace of a restart attempt (DefaultGroupStorePrefix): a counter that ddprun's elastic
// mode (launch/elastic_launch.h) raises above 0 once the worker started as RANK `member` has exited, so
// that the survivors' regroup (comm/elastic_membership.h) counts it lost at once instead of waiting.
inline std::string ElasticLostKey(int member) { return absl::StrCat("elastic/lost/", member); }

// Within the namespace of a restart attempt: a counter of the replacement workers ddprun's elastic mode
// started. The n-th replacement (n = the value Add(key, 1) returned) is member world_size + n - 1, so
// member ids are never reused, across nodes too (launch/elastic_launch.h).
inline std::string ElasticReplacementsKey() { return "elastic/replacements"; }

// Within the namespace of a restart attempt: a counter above 0 once the elastic job is ending (a worker
// finished, or the survivors gave up): ddprun starts no more replacements, and a replacement still
// waiting to be admitted stops waiting (comm/elastic_membership.h).
inline std::string ElasticClosedKey() { return "elastic/closed"; }

// Within the namespace of a restart attempt: what every member of an elastic train/train job must share
// (its settings and the data it loaded), written once by rank 0 at start-up and read by each replacement
// before it registers (train/job_profile.h).
inline std::string ElasticJobProfileKey() { return "elastic/profile"; }

}  // namespace ddp

#endif  // DDP_STORE_STORE_KEYS_H_
