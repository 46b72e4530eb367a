// The stamps that let the ranks of a shared-memory group check that they issue the same collectives:
// Note [Call stamps].
//
// Note [Call stamps]
// The ranks of a shared-memory group meet step by step, and the steps line up whatever the ranks call: a
// rank that all-reduces 1000 floats while its peer all-reduces 10, or broadcasts while its peer reduces,
// would read the peer's input as its own kind of data and return wrong numbers without an error. So
// every input a rank posts carries the stamp of its call (ShmChannel::PostInput): the high half of the
// step word the readers wait on, published with the step in one store (a second store to a line a peer
// spins on would cost a second transfer of the line, a quarter of a 4-byte all-reduce), and every
// reader compares it with its own stamp before it touches the input: a load from a line it has just
// read, and a compare. A reader that finds kReady already at the peer's next step takes the stamp from
// the peer's record line instead. In that line lies a record of the call
// (its sequence number, kind, reduce op, root, element count and dtype, and the same of the rank's
// previous call), which only a reader whose stamp differs reads back, to name both ranks' calls in the
// format of comm/collective_description.h (FailedPrecondition, as ProcessGroupGloo reports a mismatch).
// A stamp hashes the call's fingerprint (kind, reduce op, root, element count, dtype) with the stamp of
// the group's previous call, so it covers every call before it as well: a call that no rank reads
// (every rank believing itself the root of a Broadcast, or none the root of a Reduce) cannot be checked
// in its own step, but the next call that some rank reads fails, naming both ranks' previous calls. Two
// different calls (or histories) share a stamp with probability 2^-32. Inputs of different sizes may
// travel on different words (inline or in the slot, Note [Shared-memory protocol]): a reader waiting on
// one while its peer posted the other learns it from the channel when it first sleeps
// (PeerPostedInputElsewhere) and fails with the same message.
#ifndef DDP_COMM_SHM_CALL_STAMP_H_
#define DDP_COMM_SHM_CALL_STAMP_H_

#include <array>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "comm/collective_description.h"
#include "comm/shm/shm_channel.h"

namespace ddp {

using ShmCallRecord = std::array<uint64_t, ShmCallStamp::kRecordWords>;

// The calls a rank has issued on one group, as stamps see them. Not thread-safe: used by whoever holds
// the group's queue turn, once per call, in issue order (calls that take no step included, so that every
// rank's history counts the same calls).
class ShmCallHistory {
 public:
  // The stamp and record of `spec`, numbered `sequence`, the group's next call, which becomes its latest.
  ShmCallStamp Stamp(const CollectiveSpec& spec, uint64_t sequence);

 private:
  uint32_t last_stamp_ = 0;
  std::array<uint64_t, 3> last_call_{};  // the encoded latest call; all zero before the first
};

// The error of this rank's call `mine` (`what`: its description, the prefix of every error of the call)
// when rank `peer`, whose input of the same step carried `theirs` (its InputCallRecord), issued another
// call, or the same call after other ones: FailedPrecondition naming both calls (or both previous calls)
// as "<name> #<sequence> of <payload> on rank <r>/<size> (shm)". Pure.
absl::Status CallMismatchError(const std::string& what, int rank, int size, const ShmCallStamp& mine, int peer,
                               const ShmCallRecord& theirs);

}  // namespace ddp

#endif  // DDP_COMM_SHM_CALL_STAMP_H_
