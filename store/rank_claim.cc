#include "store/rank_claim.h"

#include <unistd.h>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/check.h"

// Note [Rank claims]: a job's ranks meet in a store namespace (one per restart attempt). Ranks of a
// ddprun or Spawn job reach only their own job's store, since it checks their job token; ranks started
// by hand on one host may share no secret, so a second job started on the same MASTER_PORT reaches the
// first job's store (its own rank 0 cannot listen there and fails naming the port). Before a rank
// writes anything else into the namespace it claims its rank with one CompareSet: a place already
// claimed by another process means another job, and the rank stops there, having changed nothing. The
// claim holds this process's identity (a random id chosen once per process, with pid and host for the
// error message), so a process that rendezvouses again after a failure keeps its place. Which of two
// jobs started by hand at the same time gets a rank first cannot be told apart without a shared secret:
// the other then fails naming the port, and DDP_JOB_TOKEN (or ddprun) closes that gap.

namespace ddp {
namespace {

// "<id> pid <pid> on <host>": this process, the same for every call.
const std::string& ThisProcess() {
  static const std::string* const self = [] {
    absl::BitGen gen;
    char host[256] = {0};
    if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
    return new std::string(absl::StrFormat("%016x pid %d on %s", absl::Uniform<uint64_t>(gen),
                                           static_cast<int>(::getpid()), host[0] ? host : "?"));
  }();
  return *self;
}

// The holder as the error names it: "pid 123 on host" (the claim without its id).
std::string Holder(const std::string& claim) {
  const size_t space = claim.find(' ');
  return space == std::string::npos ? claim : claim.substr(space + 1);
}

std::string JobName(const std::string& recorded) {
  return recorded.empty() ? "started by hand (no DDP_JOB_ID)" : absl::StrCat("DDP_JOB_ID=", recorded);
}

}  // namespace

absl::Status ClaimRank(Store& store, const RankClaim& claim) {
  DDP_CHECK(claim.rank >= 0) << "rank " << claim.rank;
  // The stored job id carries a prefix so that "no job id" is a value too.
  const std::string job = absl::StrCat("job:", claim.job_id);
  DDP_ASSIGN_OR_RETURN(const std::string recorded, store.CompareSet("rank_claim/job", "", job));
  if (recorded != job) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", claim.rank, " cannot join: the store at ", claim.store_description, " serves the job ",
        JobName(recorded.substr(4)), ", but this process belongs to the job ", JobName(claim.job_id),
        ": two jobs share this store's port"));
  }
  const std::string key = absl::StrCat("rank_claim/rank", claim.rank);
  DDP_ASSIGN_OR_RETURN(const std::string holder, store.CompareSet(key, "", ThisProcess()));
  if (holder == ThisProcess()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "rank ", claim.rank, " cannot join: the job at ", claim.store_description, " already has a rank ",
      claim.rank, " (", Holder(holder), "). Another job is using this port: give each job its own port "
      "(MASTER_PORT), or start them with ddprun, whose job token keeps jobs apart"));
}

}  // namespace ddp
