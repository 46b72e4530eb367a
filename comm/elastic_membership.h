// Elastic membership: after a group lost a rank, its survivors agree through the job's store on who
// forms the next generation of the group and from which optimizer step it continues (Note [Elastic
// regroup] in elastic_membership.cc). The group itself is rebuilt by comm/init.h's MakeGroupOverStore
// in the generation's own store namespace (GenerationStorePrefix).
#ifndef DDP_COMM_ELASTIC_MEMBERSHIP_H_
#define DDP_COMM_ELASTIC_MEMBERSHIP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "store/store.h"

namespace ddp {

// One generation of an elastic group. A member is named by its process's launch rank (RANK when it
// started), which never changes; its rank in the generation is its index in `members`.
struct Generation {
  int64_t number = 0;            // 0: the group InitProcessGroup formed; +1 per regroup
  std::vector<int> members;      // launch ranks, ascending; the generation's ranks in this order
  std::vector<int64_t> steps;    // steps[i]: the last step members[i] completed (empty for generation 0);
                                 // -1: a replacement that holds no training state yet

  // The rank of launch rank `member` in this generation, or -1 when it is not a member.
  int RankOf(int member) const;
  // The lowest rank whose member completed the most steps (0 when `steps` is empty): the source of the
  // state every member continues from (Note [Elastic step boundary]).
  int SourceRank() const;
  // The most steps any member completed (0 when `steps` is empty; -1 when no member holds state).
  int64_t MaxStep() const;
  // The members that joined as replacements in this generation (step -1), ascending.
  std::vector<int> Joiners() const;
  // "generation 1: launch ranks 0, 1 (steps 20, 20)".
  std::string ToString() const;
};

// Generation 0 of a group of `size` ranks: members 0..size-1. REQUIRES: size >= 1.
Generation FirstGeneration(int size);

// Encodes a generation decided by a regroup ("members=0,1;steps=20,21"), and parses it back with
// `number`; a malformed text is a DataLoss error quoting it.
std::string EncodeGenerationDecision(const Generation& generation);
absl::StatusOr<Generation> DecodeGenerationDecision(int64_t number, absl::string_view text);

// What a regroup waits for.
struct RegroupOptions {
  // How long a survivor waits for every other member to arrive or be reported lost by the launcher
  // (store/store_keys.h: ElasticLostKey); a member neither arrived nor reported by then is counted lost
  // (killed without a launcher to notice, or hung).
  absl::Duration arrival_timeout = absl::Seconds(30);
  // How often the store is polled while waiting.
  absl::Duration poll_interval = absl::Milliseconds(2);
};

// The store keys of generation `number`'s agreement (its members' arrivals and the decision), in the
// store the regroup is given.
std::string ElasticArrivalKey(int64_t number, int member);
std::string ElasticDecisionKey(int64_t number);
std::string ElasticReadyKey(int64_t number, int member);
// The store namespace (PrefixStore prefix) in which generation `number`'s group rendezvouses.
std::string GenerationStorePrefix(int64_t number);

// Called by each survivor (launch rank `member`, having completed `completed_step` optimizer steps) of
// `failed` once its group failed: records its arrival, waits (bounded by options.arrival_timeout) until
// every member of `failed` arrived or was reported lost, then proposes the arrived members as the next
// generation, with `joiners` (replacements waiting to be admitted, WaitingJoiners; not members of
// `failed`) added with step -1; the first proposal stored wins (CompareSet), so every survivor returns
// the same decision. `completed_step` is -1 for a member that holds no training state (a replacement
// whose first generation never formed). A planned regroup (every member alive, a joiner waiting) goes the
// same way: every member arrives at once.
// Errors: store failures; kAborted when the decision left this member out (it arrived after the others
// had decided without it); kFailedPrecondition when `member` is not a member of `failed`, or when no
// member of the decision holds training state (only replacements survived).
// Thread-safe as far as `store` is.
absl::StatusOr<Generation> AgreeNextGeneration(Store& store, const Generation& failed, int member,
                                               int64_t completed_step, const RegroupOptions& options,
                                               const std::vector<int>& joiners = {});

// Called by each member of `next` (as AgreeNextGeneration returned it) before its group forms: marks this
// member ready and waits until every member is ready, or one was reported lost by the launcher (then
// kUnavailable naming it: regroup again from `next`), or options.arrival_timeout passed (kDeadlineExceeded
// naming the members not ready). A member lost between the decision and its group's rendezvous is thus
// noticed at once instead of at the rendezvous timeout.
absl::Status ConfirmGeneration(Store& store, const Generation& next, int member, const RegroupOptions& options);

// Replacements (Note [Elastic join] in elastic_membership.cc). Store keys, in the same store: a joiner's
// registration (a counter above 0 once it waits) and the generation that admitted it (its number as text).
std::string ElasticJoinerKey(int member);
std::string ElasticAdmittedKey(int member);

// Called by a replacement (launch member `member`, started by ddprun's elastic mode) once it is ready to
// train: records that it waits to be admitted.
absl::Status RegisterJoiner(Store& store, int member);

// The replacements that registered and are waiting: members `first_replacement` (the job's initial world
// size) and up, as many as ddprun started (ElasticReplacementsKey), that are not in `known` (every member
// of a generation so far), registered, and not reported lost. Ascending. One store call per replacement
// not in `known`, plus one.
absl::StatusOr<std::vector<int>> WaitingJoiners(Store& store, int first_replacement, const std::vector<int>& known);

// Called by the members of `next` that hold training state, after the decision: records, for every
// joiner of `next`, that `next` admitted it. Idempotent (the first write stays).
absl::Status AnnounceAdmissions(Store& store, const Generation& next);

// What a joiner waits for.
struct AdmissionOptions {
  // How long it waits to be admitted (DDP_ELASTIC_JOIN_TIMEOUT_S).
  absl::Duration timeout = absl::Seconds(300);
  // How long one blocking read of its admission key lasts before the job's end is checked again.
  absl::Duration poll_interval = absl::Milliseconds(100);
};

// Called by a registered joiner: waits until a generation decision admits `member` and returns it.
// Errors: kDeadlineExceeded naming the member, the key and the timeout when none did in time;
// kFailedPrecondition when the job is ending (ElasticClosedKey) before it was admitted; store failures.
absl::StatusOr<Generation> AwaitAdmission(Store& store, int member, const AdmissionOptions& options);

}  // namespace ddp

#endif  // DDP_COMM_ELASTIC_MEMBERSHIP_H_
