#include "comm/elastic_membership.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/check.h"
#include "store/store_keys.h"

namespace ddp {

// Note [Elastic regroup]
// When a member of an elastic group dies, every survivor's pending or next collective fails (the
// backends close their connections or abort their channel on the first failure, so one failure fails
// them all within a fraction of a second). Each survivor then drops its group and meets the others in
// the job's store (ddprun's, which outlives every worker):
//   1. it adds completed_step + 2 to elastic/gen<g>/arrived/<member> (a counter: 0 means "not yet", so
//      a poll is one non-blocking Add(key, 0) per member; completed_step is -1 for a replacement that
//      never received the training state);
//   2. it polls until every member of generation g has arrived or has a launcher loss counter
//      (ElasticLostKey, raised by ddprun's elastic mode when the process exits), or the arrival timeout
//      passed (then the silent members are counted lost: killed with no launcher to see it, or hung);
//   3. it proposes the arrived members, with their completed steps, as generation g + 1 by
//      CompareSet(elastic/gen<g>/decision, "", proposal): the first proposal wins and every survivor
//      reads the same decision back. Proposals can only differ when an arrival races a timeout; the
//      CompareSet makes that harmless. A survivor the decision leaves out fails with kAborted.
//   4. before building generation g + 1's group, each member confirms it is still there (ConfirmGeneration:
//      elastic/gen<g+1>/ready/<member>) and waits for the others' confirmations or loss counters, so a
//      member lost between the decision and the rendezvous sends the survivors into the next regroup at
//      once rather than after the rendezvous timeout.
// Generation g + 1's group then rendezvouses under GenerationStorePrefix(g + 1), so no key of an earlier
// generation is ever read again. A member that dies during the regroup is in the decision but never
// joins the new group's rendezvous: that fails, and the survivors regroup again from generation g + 1.

// Note [Elastic join]
// ddprun's elastic mode replaces a lost worker by a new process with a new member id (launch rank
// world_size + n - 1 for its n-th replacement: ids are never reused). The replacement builds its model,
// then registers (elastic/joiner/<member>) and waits for elastic/admitted/<member>. The members notice a
// waiting joiner through their own store polls, which may differ between them, so they act on it only
// through the per-step stop agreement (train/stop_agreement.h): a rank that saw a joiner raises a bit,
// every rank sees the same combined bit after the same step and regroups there, as after a failure but
// with every member arriving at once and the joiners they saw added to the proposal with step -1 (no
// state). The first proposal stored wins as always; the members that hold state then write the
// decision's number under each joiner's admission key, and the joiner reads the decision and confirms
// as any member does. The state comes from a member that holds it (SourceRank picks the most steps;
// -1 never wins over a survivor), so the group grows back at that step boundary with identical bits.


int Generation::RankOf(int member) const {
  const auto it = std::find(members.begin(), members.end(), member);
  return it == members.end() ? -1 : static_cast<int>(it - members.begin());
}

int64_t Generation::MaxStep() const { return steps.empty() ? 0 : *std::max_element(steps.begin(), steps.end()); }

std::vector<int> Generation::Joiners() const {
  std::vector<int> joiners;
  for (size_t i = 0; i < steps.size() && i < members.size(); ++i) {
    if (steps[i] < 0) joiners.push_back(members[i]);
  }
  return joiners;
}

int Generation::SourceRank() const {
  if (steps.empty()) return 0;
  return static_cast<int>(std::max_element(steps.begin(), steps.end()) - steps.begin());  // first maximum
}

std::string Generation::ToString() const {
  std::string text = absl::StrCat("generation ", number, ": launch rank", members.size() == 1 ? " " : "s ",
                                  absl::StrJoin(members, ", "));
  if (!steps.empty()) absl::StrAppend(&text, " (completed steps ", absl::StrJoin(steps, ", "), ")");
  return text;
}

Generation FirstGeneration(int size) {
  DDP_CHECK(size >= 1) << "a group has at least one rank";
  Generation generation;
  for (int r = 0; r < size; ++r) generation.members.push_back(r);
  return generation;
}

std::string EncodeGenerationDecision(const Generation& generation) {
  return absl::StrCat("members=", absl::StrJoin(generation.members, ","), ";steps=",
                      absl::StrJoin(generation.steps, ","));
}

absl::StatusOr<Generation> DecodeGenerationDecision(int64_t number, absl::string_view text) {
  const auto malformed = [&] {
    return absl::DataLossError(absl::StrCat("elastic regroup: a malformed decision \"", text, "\" for generation ",
                                            number, " (expected members=0,1;steps=20,20)"));
  };
  const std::vector<absl::string_view> parts = absl::StrSplit(text, ';');
  if (parts.size() != 2 || !absl::StartsWith(parts[0], "members=") || !absl::StartsWith(parts[1], "steps=")) {
    return malformed();
  }
  Generation generation;
  generation.number = number;
  for (absl::string_view m : absl::StrSplit(parts[0].substr(8), ',', absl::SkipEmpty())) {
    int member = 0;
    if (!absl::SimpleAtoi(m, &member) || member < 0) return malformed();
    generation.members.push_back(member);
  }
  for (absl::string_view s : absl::StrSplit(parts[1].substr(6), ',', absl::SkipEmpty())) {
    int64_t step = 0;
    if (!absl::SimpleAtoi(s, &step) || step < -1) return malformed();
    generation.steps.push_back(step);
  }
  if (generation.members.empty() || generation.steps.size() != generation.members.size() ||
      !std::is_sorted(generation.members.begin(), generation.members.end()) ||
      std::adjacent_find(generation.members.begin(), generation.members.end()) != generation.members.end()) {
    return malformed();
  }
  return generation;
}

std::string ElasticArrivalKey(int64_t number, int member) {
  return absl::StrCat("elastic/gen", number, "/arrived/", member);
}

std::string ElasticDecisionKey(int64_t number) { return absl::StrCat("elastic/gen", number, "/decision"); }

std::string ElasticReadyKey(int64_t number, int member) {
  return absl::StrCat("elastic/gen", number, "/ready/", member);
}

std::string GenerationStorePrefix(int64_t number) { return absl::StrCat("elastic/gen", number, "/pg"); }

namespace {

// What a survivor knows of the failed generation's members while it waits.
struct Attendance {
  std::map<int, int64_t> arrived;  // member -> completed step
  std::set<int> lost;              // reported lost by the launcher
};

// One poll: the members of `failed` not accounted for yet are looked up (non-blocking Adds of 0).
absl::Status Poll(Store& store, const Generation& failed, Attendance* attendance) {
  for (int member : failed.members) {
    if (attendance->arrived.count(member) > 0 || attendance->lost.count(member) > 0) continue;
    DDP_ASSIGN_OR_RETURN(const int64_t arrived, store.Add(ElasticArrivalKey(failed.number, member), 0));
    if (arrived > 0) {
      attendance->arrived[member] = arrived - 2;
      continue;
    }
    DDP_ASSIGN_OR_RETURN(const int64_t lost, store.Add(ElasticLostKey(member), 0));
    if (lost > 0) attendance->lost.insert(member);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Generation> AgreeNextGeneration(Store& store, const Generation& failed, int member,
                                               int64_t completed_step, const RegroupOptions& options,
                                               const std::vector<int>& joiners) {
  if (failed.RankOf(member) < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("elastic regroup: launch rank ", member, " is not a member of ", failed.ToString()));
  }
  const std::string decision_key = ElasticDecisionKey(failed.number);
  DDP_RETURN_IF_ERROR(store.Add(ElasticArrivalKey(failed.number, member), completed_step + 2).status());
  const absl::Time deadline = absl::Now() + options.arrival_timeout;
  Attendance attendance;
  for (;;) {
    DDP_RETURN_IF_ERROR(Poll(store, failed, &attendance));
    if (attendance.arrived.size() + attendance.lost.size() == failed.members.size()) break;
    if (absl::Now() >= deadline) break;  // the members still silent are counted lost
    absl::SleepFor(options.poll_interval);
  }
  Generation proposal;
  proposal.number = failed.number + 1;
  std::map<int, int64_t> proposed = attendance.arrived;
  for (int joiner : joiners) {
    if (failed.RankOf(joiner) < 0) proposed.emplace(joiner, -1);
  }
  for (const auto& [m, step] : proposed) {  // ascending launch ranks: replacements come last
    proposal.members.push_back(m);
    proposal.steps.push_back(step);
  }
  DDP_ASSIGN_OR_RETURN(const std::string decided,
                       store.CompareSet(decision_key, "", EncodeGenerationDecision(proposal)));
  DDP_ASSIGN_OR_RETURN(Generation next, DecodeGenerationDecision(failed.number + 1, decided));
  if (next.RankOf(member) < 0) {
    return absl::AbortedError(absl::StrCat("elastic regroup: launch rank ", member, " arrived after the survivors of ",
                                           failed.ToString(), " had formed ", next.ToString(), " without it"));
  }
  if (next.MaxStep() < 0) {
    return absl::FailedPreconditionError(absl::StrCat("elastic regroup: no member of ", next.ToString(),
                                                      " holds the training state (only replacements that never "
                                                      "received it remain)"));
  }
  return next;
}

absl::Status ConfirmGeneration(Store& store, const Generation& next, int member, const RegroupOptions& options) {
  DDP_RETURN_IF_ERROR(store.Add(ElasticReadyKey(next.number, member), 1).status());
  const absl::Time deadline = absl::Now() + options.arrival_timeout;
  std::set<int> waiting(next.members.begin(), next.members.end());
  for (;;) {
    std::vector<int> lost;
    for (auto it = waiting.begin(); it != waiting.end();) {
      DDP_ASSIGN_OR_RETURN(const int64_t ready, store.Add(ElasticReadyKey(next.number, *it), 0));
      if (ready > 0) {
        it = waiting.erase(it);
        continue;
      }
      DDP_ASSIGN_OR_RETURN(const int64_t gone, store.Add(ElasticLostKey(*it), 0));
      if (gone > 0) lost.push_back(*it);
      ++it;
    }
    if (!lost.empty()) {
      return absl::UnavailableError(absl::StrCat("elastic regroup: launch rank(s) ", absl::StrJoin(lost, ", "),
                                                 " of ", next.ToString(), " lost before its group formed"));
    }
    if (waiting.empty()) return absl::OkStatus();
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("elastic regroup: launch rank(s) ", absl::StrJoin(waiting, ", "),
                                                      " of ", next.ToString(), " not ready within ",
                                                      absl::FormatDuration(options.arrival_timeout)));
    }
    absl::SleepFor(options.poll_interval);
  }
}

std::string ElasticJoinerKey(int member) { return absl::StrCat("elastic/joiner/", member); }

std::string ElasticAdmittedKey(int member) { return absl::StrCat("elastic/admitted/", member); }

absl::Status RegisterJoiner(Store& store, int member) {
  return store.Add(ElasticJoinerKey(member), 1).status();
}

absl::StatusOr<std::vector<int>> WaitingJoiners(Store& store, int first_replacement, const std::vector<int>& known) {
  DDP_ASSIGN_OR_RETURN(const int64_t started, store.Add(ElasticReplacementsKey(), 0));
  std::vector<int> waiting;
  for (int64_t n = 0; n < started; ++n) {
    const int member = first_replacement + static_cast<int>(n);
    if (std::find(known.begin(), known.end(), member) != known.end()) continue;
    DDP_ASSIGN_OR_RETURN(const int64_t registered, store.Add(ElasticJoinerKey(member), 0));
    if (registered == 0) continue;
    DDP_ASSIGN_OR_RETURN(const int64_t lost, store.Add(ElasticLostKey(member), 0));
    if (lost == 0) waiting.push_back(member);
  }
  return waiting;
}

absl::Status AnnounceAdmissions(Store& store, const Generation& next) {
  for (int joiner : next.Joiners()) {
    DDP_RETURN_IF_ERROR(store.CompareSet(ElasticAdmittedKey(joiner), "", absl::StrCat(next.number)).status());
  }
  return absl::OkStatus();
}

absl::StatusOr<Generation> AwaitAdmission(Store& store, int member, const AdmissionOptions& options) {
  const std::string key = ElasticAdmittedKey(member);
  const absl::Time deadline = absl::Now() + options.timeout;
  for (;;) {
    absl::StatusOr<std::string> admitted = store.Get(key, options.poll_interval);
    if (admitted.ok()) {
      int64_t number = 0;
      if (!absl::SimpleAtoi(*admitted, &number) || number < 1) {
        return absl::DataLossError(absl::StrCat("elastic join: a malformed admission \"", *admitted, "\" under ", key));
      }
      DDP_ASSIGN_OR_RETURN(const std::string decided, store.Get(ElasticDecisionKey(number - 1), options.poll_interval));
      return DecodeGenerationDecision(number, decided);
    }
    if (!absl::IsDeadlineExceeded(admitted.status()) && !absl::IsNotFound(admitted.status())) return admitted.status();
    DDP_ASSIGN_OR_RETURN(const int64_t closed, store.Add(ElasticClosedKey(), 0));
    if (closed > 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "elastic join: replacement member ", member, " was not admitted before the job ended (it finished, or its "
          "survivors gave up)"));
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "elastic join: replacement member ", member, " was not admitted within ", absl::FormatDuration(options.timeout),
          " (DDP_ELASTIC_JOIN_TIMEOUT_S): waited for a generation decision that includes it (store key ", key,
          "); the running members admit a replacement at their next step boundary"));
    }
  }
}

}  // namespace ddp
