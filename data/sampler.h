// Samplers (torch.utils.data.Sampler): which dataset indices an epoch visits, in which order, and on
// which rank. The core decisions are pure functions (EpochPermutation, DistributedShard,
// EvaluationShard, BatchIndices) so they are tested without threads or processes; the classes are thin
// stateful wrappers that remember the epoch. Samplers take rank and world size as plain integers and
// know nothing of process groups.
//
// Resumption (Note [Resumable sampling], in sampler.cc) in short: the epoch's global order is fixed by
// (seed, epoch); `SamplerState::consumed` counts the samples of that global order consumed by all ranks
// together, always a prefix of it; a resumed sampler re-divides the rest among the (possibly different)
// number of ranks.
#ifndef DDP_DATA_SAMPLER_H_
#define DDP_DATA_SAMPLER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ddp {

// ------------------------------------------------------------------------------------ pure functions

// 0..size-1 in order, or (shuffle) a Fisher-Yates permutation drawn from Generator(seed + epoch): the
// same on every rank and every run for the same (size, seed, epoch). REQUIRES: size >= 0.
std::vector<int64_t> EpochPermutation(int64_t size, bool shuffle, uint64_t seed, int64_t epoch);

// Splits `indices` into batches of `batch_size` in order; the last batch is shorter, or dropped when
// `drop_last`. REQUIRES: batch_size >= 1.
std::vector<std::vector<int64_t>> BatchIndices(const std::vector<int64_t>& indices, int64_t batch_size,
                                               bool drop_last);

// Every world_size-th entry of `order` from `rank`, without padding: every entry exactly once across
// ranks; counts differ by at most one (lower ranks get the extra). REQUIRES: world_size >= 1,
// 0 <= rank < world_size.
std::vector<int64_t> UnpaddedShard(const std::vector<int64_t>& order, int rank, int world_size);

// ----------------------------------------------------------------------------------------- samplers

// An index sampler for one rank. Not thread-safe (the loader calls it on the thread that starts an
// epoch).
class Sampler {
 public:
  virtual ~Sampler() = default;
  // The indices this sampler yields in the current epoch (SetEpoch), in order.
  virtual std::vector<int64_t> EpochIndices() const = 0;
  // How many indices EpochIndices() returns (without computing them).
  virtual int64_t Length() const = 0;
  // Selects the epoch; shuffling samplers draw a new order per epoch. Default: no effect.
  virtual void SetEpoch(int64_t epoch) { (void)epoch; }
};

// 0..size-1 in order, every epoch. REQUIRES: size >= 0.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t size) : size_(size) {}
  std::vector<int64_t> EpochIndices() const override;
  int64_t Length() const override { return size_; }

 private:
  int64_t size_;
};

// A permutation of 0..size-1 from (seed, epoch): EpochPermutation(size, true, seed, epoch). Unlike
// torch's RandomSampler the order depends only on the epoch set, never on how often it was iterated.
class RandomSampler : public Sampler {
 public:
  // REQUIRES: size >= 0.
  RandomSampler(int64_t size, uint64_t seed) : size_(size), seed_(seed) {}
  std::vector<int64_t> EpochIndices() const override;
  int64_t Length() const override { return size_; }
  void SetEpoch(int64_t epoch) override { epoch_ = epoch; }

 private:
  int64_t size_;
  uint64_t seed_;
  int64_t epoch_ = 0;
};

// Groups another sampler's indices into batches (torch's BatchSampler). `sampler` is not owned and must
// outlive this object.
class BatchSampler {
 public:
  // REQUIRES: sampler != nullptr, batch_size >= 1.
  BatchSampler(const Sampler* sampler, int64_t batch_size, bool drop_last);
  // The current epoch's batches: BatchIndices(sampler->EpochIndices(), batch_size, drop_last).
  std::vector<std::vector<int64_t>> EpochBatches() const;
  // The number of batches EpochBatches() returns.
  int64_t NumBatches() const;

 private:
  const Sampler* sampler_;
  int64_t batch_size_;
  bool drop_last_;
};

// Where a DistributedSampler stands in training: enough to resume mid-epoch on any world size.
// Serialises to a short text line ("seed=7 epoch=3 consumed=1280") or 24 little-endian bytes
// (seed, epoch, consumed as 64-bit integers, after a 4-byte magic "DSS1").
struct SamplerState {
  uint64_t seed = 0;
  int64_t epoch = 0;
  // Samples of the epoch's global order consumed by all ranks together (a prefix of the order).
  int64_t consumed = 0;

  std::string ToText() const;
  std::string ToBytes() const;
  // Inverses of ToText / ToBytes; an error names what was malformed.
  static absl::StatusOr<SamplerState> FromText(absl::string_view text);
  static absl::StatusOr<SamplerState> FromBytes(absl::string_view bytes);

  bool operator==(const SamplerState& other) const {
    return seed == other.seed && epoch == other.epoch && consumed == other.consumed;
  }
};

// Options of a DistributedSampler (the arguments of torch's DistributedSampler).
struct DistributedSamplerOptions {
  int num_replicas = 1;    // world size W
  int rank = 0;            // this rank, 0 <= rank < num_replicas
  bool shuffle = true;     // permute per epoch (false: dataset order)
  uint64_t seed = 0;       // permutation seed; must be equal on every rank
  bool drop_last = false;  // false: pad by repeating the head; true: drop the tail to a multiple of W
};

// This rank's indices of epoch `epoch`, resuming after the first `consumed` samples of the epoch's global
// order P = EpochPermutation(size, shuffle, seed, epoch) (Note [Resumable sampling]). The rest, P[consumed:],
// is laid out as torch.utils.data.DistributedSampler does:
//   * without drop_last it is padded to the next multiple of W = num_replicas by repeating the head of
//     P (P[0], P[1], ..., cyclically if the padding is longer than P);
//   * with drop_last its tail is cut to the largest multiple of W;
//   * rank r takes positions r, r + W, r + 2W, ...
// Every rank gets the same count. With consumed == 0 this is exactly torch's layout (the permutation
// itself comes from our Generator, not torch's). REQUIRES: 0 <= consumed <= size, options valid.
std::vector<int64_t> DistributedShard(int64_t size, const DistributedSamplerOptions& options, int64_t epoch,
                                      int64_t consumed = 0);

// torch.utils.data.DistributedSampler with resumable state. SetEpoch before each epoch (else every epoch
// has the same order). Not thread-safe.
class DistributedSampler : public Sampler {
 public:
  // An error names a bad option (num_replicas < 1, rank outside [0, num_replicas), size < 0).
  static absl::StatusOr<std::unique_ptr<DistributedSampler>> Create(int64_t dataset_size,
                                                                    DistributedSamplerOptions options);

  std::vector<int64_t> EpochIndices() const override;
  int64_t Length() const override;
  // Starts epoch `epoch` from its beginning (consumed = 0).
  void SetEpoch(int64_t epoch) override;

  // The state after this rank consumed the first `local_consumed` indices of EpochIndices() (and, as in
  // lockstep data-parallel training, every other rank the same number of its own). Identical on every
  // rank. REQUIRES: 0 <= local_consumed <= Length().
  SamplerState State(int64_t local_consumed) const;
  // Continues from `state` (saved under any world size): the epoch's remaining samples, re-divided among
  // this sampler's ranks. An error names a consumed count outside [0, dataset size].
  absl::Status Restore(const SamplerState& state);

  const DistributedSamplerOptions& options() const { return options_; }
  int64_t epoch() const { return epoch_; }

 private:
  DistributedSampler(int64_t dataset_size, DistributedSamplerOptions options)
      : size_(dataset_size), options_(options) {}

  int64_t size_;
  DistributedSamplerOptions options_;
  int64_t epoch_ = 0;
  int64_t start_ = 0;  // global samples consumed before this sampler's EpochIndices() begin
};

// Evaluation: every sample exactly once across ranks, no padding (counts differ by at most one), in
// dataset order: rank r takes r, r + W, r + 2W, ... (fastNLP's UnrepeatedSequentialSampler). Distributed
// metrics summed over ranks are then exact.
class EvaluationSampler : public Sampler {
 public:
  // An error names a bad argument (world_size < 1, rank outside [0, world_size), size < 0).
  static absl::StatusOr<std::unique_ptr<EvaluationSampler>> Create(int64_t dataset_size, int rank, int world_size);
  std::vector<int64_t> EpochIndices() const override;
  int64_t Length() const override;

 private:
  EvaluationSampler(int64_t size, int rank, int world_size) : size_(size), rank_(rank), world_size_(world_size) {}

  int64_t size_;
  int rank_;
  int world_size_;
};

}  // namespace ddp

#endif  // DDP_DATA_SAMPLER_H_
