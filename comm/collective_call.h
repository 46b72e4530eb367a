// CollectiveCall: what a rank calls, as the ranks of a group compare it (its sequence number and
// signature), the Gloo tag derived from it, and the description of ranks that called different
// collectives. See Note [Collective tags].
#ifndef DDP_COMM_COLLECTIVE_CALL_H_
#define DDP_COMM_COLLECTIVE_CALL_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "store/store.h"

namespace ddp {

// One collective call of one rank.
struct CollectiveCall {
  // Position of the call in its group's issue order: 0 for the first collective, 1 for the next, ...
  uint32_t sequence = 0;
  // What every rank must call alike at this position, e.g. "AllReduce(sum) of 1000 float32",
  // "Broadcast(root 0) of 3 int64", "Barrier".
  std::string signature;
};

// The 32-bit Gloo tag of `call`: the low 16 bits of the sequence number and a 16-bit hash of the
// signature, so that calls the ranks disagree on use different Gloo slots and never exchange data.
// Pure; the same on every rank and every build.
uint32_t GlooTag(const CollectiveCall& call);

// "<sequence> <signature>", the form published in a store, and back. DecodeCall returns nullopt for a
// value that is not in that form.
std::string EncodeCall(const CollectiveCall& call);
std::optional<CollectiveCall> DecodeCall(absl::string_view text);

// Pure. The calls in `others` (rank -> call) that have `mine.sequence` and another signature, grouped by
// signature, e.g. "ranks called different collectives at call #0: this rank (0) AllReduce(sum) of 1000
// float32, rank 1 AllReduce(sum) of 3 float32". Calls at other sequence numbers say nothing (a rank may
// have failed one call earlier or later). "" when no rank disagrees.
std::string DescribeCallMismatch(int rank, const CollectiveCall& mine, const std::map<int, CollectiveCall>& others);

// Error-path helpers over the group's store, under `<key_prefix><rank>`. PublishCall writes `call` for
// `rank` (best effort: a store error is ignored); ReadOtherCalls reads, without waiting, the calls the
// other ranks of a group of `size` published (ranks with none, or an unreadable one, are left out).
void PublishCall(Store& store, const std::string& key_prefix, int rank, const CollectiveCall& call);
std::map<int, CollectiveCall> ReadOtherCalls(Store& store, const std::string& key_prefix, int rank, int size);

}  // namespace ddp

#endif  // DDP_COMM_COLLECTIVE_CALL_H_
