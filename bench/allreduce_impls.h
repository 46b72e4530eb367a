// The all-reduce implementations bench/allreduce times, as one rank process sees them: which ones exist,
// how they are named on the command line, and how a rank joins them all through one FileStore.
//
// Every rank joins a Gloo context used directly ("raw"), which also carries the benchmark's own control
// traffic (barriers, the agreed iteration count, the maximum over ranks); "ours" (ProcessGroupGloo) and
// "shm" (ProcessGroupShm) are created only when asked for, each through its own key prefix of the same
// FileStore, so the three rendezvous never see each other's keys.
#ifndef DDP_BENCH_ALLREDUCE_IMPLS_H_
#define DDP_BENCH_ALLREDUCE_IMPLS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "tensor/tensor.h"

namespace gloo {
class Context;
}  // namespace gloo

namespace ddp {

class FileStore;
class PrefixStore;
class ProcessGroup;
class ProcessGroupDebug;
class ProcessGroupGloo;
class ProcessGroupShm;
class ShmFloor;

// One all-reduce implementation (float32 sum, in place).
enum class AllReduceImpl {
  kOurs,  // ProcessGroupGloo::AllReduce(t)->Wait(): the group's worker thread runs gloo::allreduce
  kRaw,   // gloo::allreduce on the calling thread, over a second Gloo context with the same options
  kShm,   // ProcessGroupShm::AllReduce(t)->Wait(): shared memory (small ones run on the calling thread)
  kShmBuf,  // kShm on a tensor from ProcessGroupShm::NewCommBuffer, as DDP's buckets: the peers read it in
            // place (Note [Zero-copy all-reduce] in comm/shm/allreduce_two_shot.cc); same group as kShm
  kFloor,   // bench/shm_floor.h: kShmBuf's algorithm with nothing else, the yardstick for it
};

// "ours", "raw", "shm", "shm_buf" or "floor": the names of --impls and of the JSON rows' "impl" field.
const char* AllReduceImplName(AllReduceImpl impl);

// Parses a comma-separated list such as "ours,raw,shm" (order kept: it is the rotation's order).
// Fails with InvalidArgument naming an unknown or repeated name, or an empty list.
absl::StatusOr<std::vector<AllReduceImpl>> ParseAllReduceImpls(absl::string_view text);

// How a rank joins (BenchRank::Join).
struct BenchRankOptions {
  // Bound on every rendezvous, every timed call and every control call.
  absl::Duration timeout = absl::Seconds(120);
  // The implementations to create; "raw" is always created (control traffic), timed only if listed.
  std::vector<AllReduceImpl> impls = {AllReduceImpl::kOurs, AllReduceImpl::kRaw};
  // "ours" goes through a ProcessGroupDebug over the group (DDP_DEBUG=detail). REQUIRES: kOurs listed.
  bool debug_detail = false;
  // The largest all-reduce "floor" serves (its segment's size).
  size_t floor_bytes = size_t{64} << 20;
};

// One rank's all-reduce implementations and its control channel. Not thread-safe (one thread: the rank
// process's main thread). Every failing call prints the error naming the rank and ends the process with
// exit code 3 (a benchmark has no recovery, and a rank that returned would leave its peers waiting
// until their timeout).
class BenchRank {
 public:
  // Joins every implementation in options.impls, and the raw context, through the FileStore at
  // `store_path` (shared by all `world` ranks; keys under "pg/", "shmpg/" and "raw/"). Errors name the
  // implementation whose rendezvous failed. REQUIRES: 0 <= rank < world.
  static absl::StatusOr<std::unique_ptr<BenchRank>> Join(const std::string& store_path, int rank, int world,
                                                         const BenchRankOptions& options);
  ~BenchRank();
  BenchRank(const BenchRank&) = delete;
  BenchRank& operator=(const BenchRank&) = delete;

  int rank() const { return rank_; }
  int size() const { return world_; }

  // A zero-filled float32 tensor of `count` elements for `impl`'s calls: from the shm group's
  // NewCommBuffer for kShmBuf, a view of the floor's one buffer for kFloor (valid until the next
  // NewTensor(kFloor)), an ordinary one otherwise. REQUIRES: `impl` was joined.
  Tensor NewTensor(AllReduceImpl impl, int64_t count) const;
  // One all-reduce (sum, in place) of `t` through `impl`. REQUIRES: `impl` was joined; t is contiguous
  // float32 on the CPU.
  void AllReduce(AllReduceImpl impl, const Tensor& t);
  // One ProcessGroupGloo::ReduceScatter (sum). REQUIRES: kOurs was joined.
  void OursReduceScatter(const Tensor& output, const std::vector<Tensor>& inputs);

  // Control traffic on the raw context (never timed).
  void Barrier();
  int64_t BroadcastFromZero(int64_t value);
  double MaxOverRanks(double value);

 private:
  BenchRank(int rank, int world, absl::Duration timeout);
  // One gloo::allreduce (sum) of `count` floats at `data` on the raw context.
  void RawAllReduce(float* data, size_t count);
  // Ends the process after printing `status` (see the class comment).
  [[noreturn]] void Fail(const absl::Status& status) const;

  const int rank_;
  const int world_;
  const absl::Duration timeout_;
  std::unique_ptr<FileStore> store_;
  std::unique_ptr<PrefixStore> gloo_group_store_;  // kept for ProcessGroupGloo's failure reports
  std::unique_ptr<ProcessGroupGloo> gloo_group_;   // null unless kOurs
  std::unique_ptr<ProcessGroupDebug> debug_;       // null unless debug_detail
  std::unique_ptr<ProcessGroupShm> shm_group_;     // null unless kShm
  std::unique_ptr<ShmFloor> floor_;                // null unless kFloor
  std::shared_ptr<gloo::Context> raw_;
  uint32_t raw_tag_ = 0;  // tag of the last timed raw all-reduce (control traffic uses tag 0)
};

}  // namespace ddp

#endif  // DDP_BENCH_ALLREDUCE_IMPLS_H_
