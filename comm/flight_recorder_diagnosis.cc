#include "comm/flight_recorder_diagnosis.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace ddp {
namespace {

using nlohmann::json;

std::string Seconds(absl::Duration d) { return absl::StrFormat("%.1fs", absl::ToDoubleSeconds(d)); }

// "AllReduce(sum) #252 of 4 int64" from the signature "AllReduce(sum) of 4 int64" (the description format).
std::string CallAt(const std::string& signature, uint64_t sequence) {
  const size_t of = signature.find(" of ");
  if (of == std::string::npos) return absl::StrCat(signature, " #", sequence);
  return absl::StrCat(signature.substr(0, of), " #", sequence, signature.substr(of));
}

// Where a rank stands in the issue order: its pending call's number, or the next one when it has issued
// nothing since its last completed call; a rank that issued the call stands after one that has not.
std::pair<int64_t, int> Position(const RankProgress& p) {
  if (p.pending) return {static_cast<int64_t>(p.pending->sequence), 1};
  return {p.last_completed + 1, 0};
}

// "running for 5.0s", "queued for 5.0s, not started" or "failed after 5.0s", as of the report or dump.
std::string StatePhrase(const RankProgress::Call& c) {
  if (c.state == FlightState::kIssued) return absl::StrCat("queued for ", Seconds(c.age), ", not started");
  if (c.state == FlightState::kStarted) return absl::StrCat("running for ", Seconds(c.age));
  return absl::StrCat("failed after ", Seconds(c.age));
}

// "in AllReduce(sum) #252 of 4 int64 (running for 5.0s)", after "rank 1 is".
std::string Where(const RankProgress& p) {
  if (!p.pending) {
    if (p.last_completed < 0) return "before its first call";
    return absl::StrCat("past #", p.last_completed, " with nothing issued since (busy outside collectives)");
  }
  const RankProgress::Call& c = *p.pending;
  return absl::StrCat("in ", CallAt(c.call, c.sequence), " (", StatePhrase(c), ")");
}

const char* IsOrAre(const std::vector<int>& ranks) { return ranks.size() == 1 ? " is " : " are "; }

// The silent ranks (not heard from) are behind: what is known of them, and the call the others wait in.
std::string DiagnoseSilent(const GroupProgress& g, const std::vector<int>& silent,
                           const std::map<int, RankProgress>& known) {
  std::vector<std::string> reasons;
  std::vector<int> plain;
  for (int r : silent) {
    if (auto notice = g.exited.find(r); notice != g.exited.end()) {
      reasons.push_back(absl::StrCat("rank ", r, " exited (", notice->second, ")"));
    } else {
      plain.push_back(r);
    }
  }
  if (!plain.empty()) {
    reasons.insert(reasons.begin(), absl::StrCat(g.silence, " from ", NameRanks(plain),
                                                 " (stopped, hung, or busy outside collectives)"));
  }
  std::string text = absl::StrCat(NameRanks(silent), IsOrAre(silent), "behind: ", absl::StrJoin(reasons, "; "));
  // The frontier: the oldest call a rank that was heard from is stuck in.
  const RankProgress* frontier = nullptr;
  std::vector<int> at_frontier;
  for (const auto& [r, p] : known) {
    if (!p.pending) continue;
    if (frontier == nullptr || p.pending->sequence < frontier->pending->sequence) {
      frontier = &p;
      at_frontier = {r};
    } else if (p.pending->sequence == frontier->pending->sequence) {
      at_frontier.push_back(r);
    }
  }
  const char* subject = silent.size() == 1 ? "it has" : "they have";
  if (frontier != nullptr) {
    const RankProgress::Call& c = *frontier->pending;
    absl::StrAppend(&text, "; ", subject, " not completed ", CallAt(c.call, c.sequence), ", which ",
                    NameRanks(at_frontier), IsOrAre(at_frontier), "in (", StatePhrase(c));
    if (frontier->last_completed >= 0) {
      absl::StrAppend(&text, ", after completing every call through #", frontier->last_completed);
    }
    text += ")";
  } else if (!known.empty()) {
    std::vector<int> ranks;
    int64_t through = INT64_MAX;
    for (const auto& [r, p] : known) {
      ranks.push_back(r);
      through = std::min(through, p.last_completed);
    }
    absl::StrAppend(&text, "; ", NameRanks(ranks), " completed every call through #", through);
  }
  return text;
}

// Everyone was heard from: the ranks at the lowest position are behind, unless all stand together.
std::string DiagnoseHeard(const std::map<int, RankProgress>& known) {
  std::map<std::pair<int64_t, int>, std::vector<int>> by_position;
  for (const auto& [r, p] : known) by_position[Position(p)].push_back(r);
  const std::vector<int>& lowest = by_position.begin()->second;
  if (by_position.size() == 1) {
    const RankProgress& first = known.at(lowest.front());
    std::map<std::string, std::vector<int>> by_call;
    for (int r : lowest) {
      const RankProgress& p = known.at(r);
      by_call[p.pending ? p.pending->call : ""].push_back(r);
    }
    if (by_call.size() > 1) {
      std::vector<std::string> calls;
      for (const auto& [call, ranks] : by_call) calls.push_back(absl::StrCat(NameRanks(ranks), " ", call));
      return absl::StrCat("no rank is behind, but the ranks called different collectives at #",
                          first.pending->sequence, ": ", absl::StrJoin(calls, ", "));
    }
    // The longest wait says most: name the rank that has waited longest.
    const RankProgress* longest = &first;
    for (int r : lowest) {
      const RankProgress& p = known.at(r);
      if (p.pending && p.pending->age > longest->pending->age) longest = &p;
    }
    return absl::StrCat("no rank is behind: ", NameRanks(lowest), IsOrAre(lowest), Where(*longest));
  }
  std::string text = absl::StrCat(NameRanks(lowest), IsOrAre(lowest), "behind: ", lowest.size() == 1 ? "it is " : "they are ",
                                  Where(known.at(lowest.front())), ", while ");
  std::vector<std::string> others;
  for (auto it = std::next(by_position.begin()); it != by_position.end(); ++it) {
    others.push_back(absl::StrCat(NameRanks(it->second), IsOrAre(it->second), Where(known.at(it->second.front()))));
  }
  return text + absl::StrJoin(others, "; ");
}

}  // namespace

std::string NameRanks(const std::vector<int>& ranks) {
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ", absl::StrJoin(ranks, ", "));
}

std::string DescribeRankProgress(int rank, const RankProgress& progress) {
  std::string text = absl::StrCat("rank ", rank, " is ", Where(progress));
  if (progress.pending && progress.last_completed >= 0) {
    absl::StrAppend(&text, ", after completing every call through #", progress.last_completed);
  }
  return text;
}

RankProgress ProgressOf(const std::vector<FlightEntry>& entries, absl::Time now) {
  RankProgress progress;
  for (const FlightEntry& e : entries) {
    if (e.sequence == kUnnumbered) continue;
    if (e.state == FlightState::kCompleted) {
      progress.last_completed = std::max<int64_t>(progress.last_completed, static_cast<int64_t>(e.sequence));
      continue;
    }
    if (progress.pending) continue;  // the oldest one is the one that holds the rank up
    RankProgress::Call call;
    call.sequence = e.sequence;
    call.call = e.spec.Signature();
    call.state = e.state;
    const absl::Time since = e.state == FlightState::kIssued || e.started == absl::InfinitePast() ? e.issued : e.started;
    call.age = std::max(absl::ZeroDuration(), now - since);
    progress.pending = std::move(call);
  }
  return progress;
}

std::string EncodeProgress(const RankProgress& progress) {
  json j = {{"last_completed", progress.last_completed}, {"pending", nullptr}};
  if (progress.pending) {
    const RankProgress::Call& c = *progress.pending;
    j["pending"] = {{"seq", c.sequence},
                    {"call", c.call},
                    {"state", FlightStateName(c.state)},
                    {"age_ms", absl::ToInt64Milliseconds(c.age)}};
  }
  return j.dump();
}

absl::StatusOr<RankProgress> DecodeProgress(absl::string_view text) {
  const json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  const absl::Status bad = absl::InvalidArgumentError(absl::StrCat("not a rank's progress: ", text));
  if (!j.is_object() || !j.contains("last_completed") || !j["last_completed"].is_number_integer()) return bad;
  RankProgress progress;
  progress.last_completed = j["last_completed"].get<int64_t>();
  const json& pending = j.value("pending", json(nullptr));
  if (pending.is_null()) return progress;
  if (!pending.is_object() || !pending.contains("seq") || !pending["seq"].is_number_unsigned() ||
      !pending.contains("call") || !pending["call"].is_string()) {
    return bad;
  }
  RankProgress::Call call;
  call.sequence = pending["seq"].get<uint64_t>();
  call.call = pending["call"].get<std::string>();
  const std::string state = pending.value("state", "");
  if (state == "issued") {
    call.state = FlightState::kIssued;
  } else if (state == "started") {
    call.state = FlightState::kStarted;
  } else if (state == "failed") {
    call.state = FlightState::kFailed;
  } else {
    return bad;
  }
  const json& age = pending.value("age_ms", json(0));
  call.age = absl::Milliseconds(age.is_number_integer() ? age.get<int64_t>() : 0);
  progress.pending = std::move(call);
  return progress;
}

std::string DiagnoseProgress(const GroupProgress& g) {
  std::map<int, RankProgress> known;
  std::vector<int> silent, unrecorded;
  for (int r = 0; r < g.size; ++r) {
    auto heard = g.heard.find(r);
    if (heard == g.heard.end()) {
      silent.push_back(r);
    } else if (heard->second.has_value()) {
      known.emplace(r, *heard->second);
    } else {
      unrecorded.push_back(r);
    }
  }
  std::string text;
  if (!silent.empty()) {
    text = DiagnoseSilent(g, silent, known);
  } else if (!known.empty()) {
    text = DiagnoseHeard(known);
  } else {
    return "no rank recorded its calls (DDP_FLIGHT_RECORDER_ENTRIES=0)";
  }
  if (!unrecorded.empty()) {
    absl::StrAppend(&text, "; ", NameRanks(unrecorded), " recorded no calls (DDP_FLIGHT_RECORDER_ENTRIES=0)");
  }
  return text;
}

}  // namespace ddp
