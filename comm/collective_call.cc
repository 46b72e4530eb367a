#include "comm/collective_call.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/fnv1a.h"

namespace ddp {

// Note [Collective tags]
// Gloo matches a send to a receive by (peer, slot), and the slot is built from the collective's tag.
// When two ranks run different collectives under one tag (e.g. DDP with different bucket caps: rank 0
// all-reduces 535820 floats while rank 1 all-reduces 3), the receiver finds a posted buffer smaller than
// the incoming message and Gloo throws gloo::EnforceNotMet ("op.preamble.length <= op.nbytes") on its
// own event-loop thread, where nothing can catch it: std::terminate, exit 134. So the tag carries a
// 16-bit hash of the call's signature (kind, reduce op or root, element count, dtype) beside 16 bits of
// its sequence number. Calls that disagree then use different slots: nothing is exchanged, each rank's
// collective fails at the group's timeout with a Status naming it (a slot's sends wait for the matching
// receive), and the failure path compares the ranks' published calls to say which ranks called what
// (ProcessGroupGloo, DescribeCallMismatch). DDP_DEBUG=detail (comm/process_group_debug.h) compares every
// call before issuing it, which fails at once instead of at the timeout, for one small all-gather per
// call. 16 bits of sequence suffice: a rank cannot be more than one collective ahead of any peer (each
// collective needs every peer to have posted its side), so only neighbouring calls are in flight
// together. Two different signatures share a hash with probability 1/65536; only then does Gloo's crash
// remain possible.
// Send and Recv, which only two ranks take part in, build their slot from the signature and the user's
// tag instead of a sequence number (Note [Point-to-point tags] in comm/gloo/process_group_gloo_collectives.cc).

uint32_t GlooTag(const CollectiveCall& call) {
  const uint64_t hash = Fnv1a64(call.signature.data(), call.signature.size());
  const uint32_t folded = static_cast<uint32_t>((hash >> 48) ^ (hash >> 32) ^ (hash >> 16) ^ hash) & 0xffffu;
  return (folded << 16) | (call.sequence & 0xffffu);
}

std::string EncodeCall(const CollectiveCall& call) { return absl::StrCat(call.sequence, " ", call.signature); }

std::optional<CollectiveCall> DecodeCall(absl::string_view text) {
  const size_t space = text.find(' ');
  CollectiveCall call;
  if (space == absl::string_view::npos || !absl::SimpleAtoi(text.substr(0, space), &call.sequence)) {
    return std::nullopt;
  }
  call.signature = std::string(text.substr(space + 1));
  return call;
}

std::string DescribeCallMismatch(int rank, const CollectiveCall& mine, const std::map<int, CollectiveCall>& others) {
  std::map<std::string, std::vector<int>> ranks_by_signature;
  for (const auto& [r, call] : others) {
    if (r != rank && call.sequence == mine.sequence && call.signature != mine.signature) {
      ranks_by_signature[call.signature].push_back(r);
    }
  }
  if (ranks_by_signature.empty()) return "";
  std::vector<std::string> parts = {absl::StrCat("this rank (", rank, ") ", mine.signature)};
  for (const auto& [signature, ranks] : ranks_by_signature) {
    parts.push_back(absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ", absl::StrJoin(ranks, ", "), " ", signature));
  }
  return absl::StrCat("ranks called different collectives at call #", mine.sequence, ": ",
                      absl::StrJoin(parts, ", "));
}

void PublishCall(Store& store, const std::string& key_prefix, int rank, const CollectiveCall& call) {
  (void)store.Set(absl::StrCat(key_prefix, rank), EncodeCall(call));
}

std::map<int, CollectiveCall> ReadOtherCalls(Store& store, const std::string& key_prefix, int rank, int size) {
  std::map<int, CollectiveCall> calls;
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    absl::StatusOr<std::string> value = store.Get(absl::StrCat(key_prefix, r), absl::ZeroDuration());
    if (!value.ok()) continue;
    if (std::optional<CollectiveCall> call = DecodeCall(*value)) calls[r] = *std::move(call);
  }
  return calls;
}

}  // namespace ddp
