#include "comm/shm/call_stamp.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ddp {
namespace {

// Bit 24 of a record's third word: a call is recorded there (a rank's first call has no previous one).
constexpr uint64_t kRecorded = uint64_t{1} << 24;

// The finaliser of splitmix64: every input bit moves every output bit.
uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A call as three words: sequence; element count; kind, reduce op, dtype, the recorded bit and the root.
std::array<uint64_t, 3> Encode(const CollectiveSpec& spec, uint64_t sequence) {
  return {sequence, static_cast<uint64_t>(spec.numel),
          static_cast<uint64_t>(spec.kind) | static_cast<uint64_t>(spec.op) << 8 |
              static_cast<uint64_t>(spec.dtype) << 16 | kRecorded |
              static_cast<uint64_t>(static_cast<uint32_t>(spec.root)) << 32};
}

// A decoded call: the spec and its sequence number.
struct DecodedCall {
  CollectiveSpec spec;
  uint64_t sequence = 0;
};

// The call in words [at, at + 3) of `record`; nullopt when none is recorded there or a field is out of
// range (a peer of another build).
std::optional<DecodedCall> Decode(const ShmCallRecord& record, int at) {
  const uint64_t packed = record[at + 2];
  if ((packed & kRecorded) == 0) return std::nullopt;
  const uint64_t kind = packed & 0xff, op = packed >> 8 & 0xff, dtype = packed >> 16 & 0xff;
  if (kind > static_cast<uint64_t>(CollectiveKind::kMonitoredBarrier) ||
      op > static_cast<uint64_t>(ReduceOp::kProduct) || dtype > static_cast<uint64_t>(DType::kBFloat16)) {
    return std::nullopt;
  }
  DecodedCall call;
  call.sequence = record[at];
  call.spec.kind = static_cast<CollectiveKind>(kind);
  call.spec.op = static_cast<ReduceOp>(op);
  call.spec.dtype = static_cast<DType>(dtype);
  call.spec.root = static_cast<int32_t>(static_cast<uint32_t>(packed >> 32));
  call.spec.numel = static_cast<int64_t>(record[at + 1]);
  return call;
}

// "Broadcast(root 0) #3 of 1000 float32 on rank 1/2 (shm)", "no call" or "an unrecognised call".
std::string Describe(const ShmCallRecord& record, int at, int rank, int size) {
  if ((record[at + 2] & kRecorded) == 0) return "no call";
  const std::optional<DecodedCall> call = Decode(record, at);
  if (!call.has_value()) return "an unrecognised call";
  return DescribeCall(call->spec, call->sequence, rank, size, "shm");
}

}  // namespace

ShmCallStamp ShmCallHistory::Stamp(const CollectiveSpec& spec, uint64_t sequence) {
  const std::array<uint64_t, 3> call = Encode(spec, sequence);
  // The fingerprint (element count; kind, op, dtype and root) leaves the sequence number out: the
  // history carries the order. One mix: the smallest collectives stamp every call.
  ShmCallStamp stamp;
  stamp.stamp = static_cast<uint32_t>(
      Mix(call[1] * 0x9e3779b97f4a7c15ULL ^ call[2] ^ static_cast<uint64_t>(last_stamp_) << 40 ^ last_stamp_) >> 32);
  for (int i = 0; i < 3; ++i) {
    stamp.record[i] = call[i];
    stamp.record[3 + i] = last_call_[i];
  }
  last_stamp_ = stamp.stamp;
  last_call_ = call;
  return stamp;
}

absl::Status CallMismatchError(const std::string& what, int rank, int size, const ShmCallStamp& mine, int peer,
                               const ShmCallRecord& theirs) {
  const auto same_call = [&](int at) { return mine.record[at + 1] == theirs[at + 1] && mine.record[at + 2] == theirs[at + 2]; };
  if (!same_call(0)) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": rank ", peer, " called ", Describe(theirs, 0, peer, size),
                                                      " at this point; ranks must issue the same collectives in the "
                                                      "same order"));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      what, ": rank ", peer, " issued other collectives before this one: its previous call was ",
      Describe(theirs, 3, peer, size), ", this rank's ", Describe(mine.record, 3, rank, size),
      "; ranks must issue the same collectives in the same order"));
}

}  // namespace ddp
