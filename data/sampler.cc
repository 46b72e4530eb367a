// Note [Resumable sampling]
// The global order of an epoch is EpochPermutation(size, shuffle, seed, epoch), the same on every rank
// and under every world size. A DistributedSampler with W ranks lays the not-yet-consumed suffix of that
// order out as torch does (pad or drop to a multiple of W, rank r takes r, r + W, ...). When every rank
// has consumed k of its indices (data-parallel training runs in lockstep), the positions consumed are
// exactly the first k * W of the laid-out suffix, i.e. a prefix of the global order of length
// min(k * W, suffix length) -- padding lies at the end, so consuming into it means the whole suffix is
// consumed. `SamplerState::consumed` is that prefix length, counted from the start of the epoch. A
// sampler restored from it (any world size W') lays out order[consumed:] for W' ranks, so no sample of
// the global order is skipped, and none repeats except the padding torch's layout itself adds. Padding
// always repeats the head of the epoch's order (not of the remainder), so resuming under the same world
// size reproduces the rest of every rank's original shard exactly, padding included.
#include "data/sampler.h"

#include <cstring>
#include <numeric>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/check.h"
#include "tensor/random.h"

namespace ddp {
namespace {

absl::Status ValidateRankAndWorld(int64_t size, int rank, int world_size) {
  if (size < 0) return absl::InvalidArgumentError(absl::StrCat("dataset size must be >= 0, got ", size));
  if (world_size < 1) return absl::InvalidArgumentError(absl::StrCat("num_replicas must be >= 1, got ", world_size));
  if (rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat("rank must be in [0, ", world_size, "), got ", rank));
  }
  return absl::OkStatus();
}

// Indices per rank when `remaining` samples are laid out for `world_size` ranks.
int64_t ShardLength(int64_t remaining, int world_size, bool drop_last) {
  return drop_last ? remaining / world_size : (remaining + world_size - 1) / world_size;
}

constexpr char kStateMagic[] = "DSS1";

void AppendLittleEndian(uint64_t value, std::string* out) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

uint64_t ReadLittleEndian(absl::string_view bytes) {
  uint64_t value = 0;
  for (int i = 0; i < 8; ++i) value |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  return value;
}

}  // namespace

std::vector<int64_t> EpochPermutation(int64_t size, bool shuffle, uint64_t seed, int64_t epoch) {
  DDP_CHECK(size >= 0) << "EpochPermutation of size " << size;
  std::vector<int64_t> order(size);
  std::iota(order.begin(), order.end(), 0);
  if (!shuffle) return order;
  Generator generator(seed + static_cast<uint64_t>(epoch));
  for (int64_t i = size - 1; i > 0; --i) std::swap(order[i], order[generator.RandomIndex(i + 1)]);
  return order;
}

std::vector<std::vector<int64_t>> BatchIndices(const std::vector<int64_t>& indices, int64_t batch_size,
                                               bool drop_last) {
  DDP_CHECK(batch_size >= 1) << "batch_size " << batch_size;
  std::vector<std::vector<int64_t>> batches;
  const int64_t n = static_cast<int64_t>(indices.size());
  for (int64_t begin = 0; begin < n; begin += batch_size) {
    const int64_t end = std::min(begin + batch_size, n);
    if (drop_last && end - begin < batch_size) break;
    batches.emplace_back(indices.begin() + begin, indices.begin() + end);
  }
  return batches;
}

std::vector<int64_t> UnpaddedShard(const std::vector<int64_t>& order, int rank, int world_size) {
  DDP_CHECK(world_size >= 1 && rank >= 0 && rank < world_size) << "rank " << rank << " of " << world_size;
  std::vector<int64_t> shard;
  for (size_t i = rank; i < order.size(); i += world_size) shard.push_back(order[i]);
  return shard;
}

std::vector<int64_t> SequentialSampler::EpochIndices() const { return EpochPermutation(size_, false, 0, 0); }

std::vector<int64_t> RandomSampler::EpochIndices() const { return EpochPermutation(size_, true, seed_, epoch_); }

BatchSampler::BatchSampler(const Sampler* sampler, int64_t batch_size, bool drop_last)
    : sampler_(sampler), batch_size_(batch_size), drop_last_(drop_last) {
  DDP_CHECK(sampler != nullptr && batch_size >= 1) << "BatchSampler needs a sampler and batch_size >= 1";
}

std::vector<std::vector<int64_t>> BatchSampler::EpochBatches() const {
  return BatchIndices(sampler_->EpochIndices(), batch_size_, drop_last_);
}

int64_t BatchSampler::NumBatches() const {
  const int64_t n = sampler_->Length();
  return drop_last_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
}

// ------------------------------------------------------------------------------------ SamplerState

std::string SamplerState::ToText() const { return absl::StrCat("seed=", seed, " epoch=", epoch, " consumed=", consumed); }

std::string SamplerState::ToBytes() const {
  std::string out(kStateMagic, 4);
  AppendLittleEndian(seed, &out);
  AppendLittleEndian(static_cast<uint64_t>(epoch), &out);
  AppendLittleEndian(static_cast<uint64_t>(consumed), &out);
  return out;
}

absl::StatusOr<SamplerState> SamplerState::FromText(absl::string_view text) {
  std::vector<absl::string_view> fields = absl::StrSplit(text, ' ', absl::SkipEmpty());
  const char* names[] = {"seed=", "epoch=", "consumed="};
  if (fields.size() != 3) {
    return absl::InvalidArgumentError(absl::StrCat("sampler state \"", text, "\": expected seed=S epoch=E consumed=C"));
  }
  SamplerState state;
  for (int i = 0; i < 3; ++i) {
    absl::string_view field = fields[i];
    const absl::string_view name = names[i];
    bool ok = field.substr(0, name.size()) == name;
    field.remove_prefix(std::min(field.size(), name.size()));
    if (ok) ok = i == 0 ? absl::SimpleAtoi(field, &state.seed) : absl::SimpleAtoi(field, i == 1 ? &state.epoch : &state.consumed);
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("sampler state \"", text, "\": field ", i + 1, " is not ", name, "<integer>"));
    }
  }
  if (state.consumed < 0) return absl::InvalidArgumentError(absl::StrCat("sampler state \"", text, "\": consumed < 0"));
  return state;
}

absl::StatusOr<SamplerState> SamplerState::FromBytes(absl::string_view bytes) {
  if (bytes.size() != 28 || bytes.substr(0, 4) != absl::string_view(kStateMagic, 4)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampler state bytes: expected 28 bytes starting with \"DSS1\", got ", bytes.size(), " bytes"));
  }
  SamplerState state;
  state.seed = ReadLittleEndian(bytes.substr(4));
  state.epoch = static_cast<int64_t>(ReadLittleEndian(bytes.substr(12)));
  state.consumed = static_cast<int64_t>(ReadLittleEndian(bytes.substr(20)));
  if (state.consumed < 0) return absl::InvalidArgumentError("sampler state bytes: consumed < 0");
  return state;
}

// ------------------------------------------------------------------------------ DistributedSampler

std::vector<int64_t> DistributedShard(int64_t size, const DistributedSamplerOptions& options, int64_t epoch,
                                      int64_t consumed) {
  DDP_CHECK(consumed >= 0 && consumed <= size) << "consumed " << consumed << " of " << size;
  const int world = options.num_replicas;
  DDP_CHECK(world >= 1 && options.rank >= 0 && options.rank < world) << "rank " << options.rank << " of " << world;
  const std::vector<int64_t> order = EpochPermutation(size, options.shuffle, options.seed, epoch);
  const int64_t remaining = size - consumed;
  const int64_t per_rank = ShardLength(remaining, world, options.drop_last);
  std::vector<int64_t> shard;
  shard.reserve(per_rank);
  for (int64_t i = 0; i < per_rank; ++i) {
    // Position q of the laid-out list: order[consumed + q], or padding from the order's head.
    const int64_t q = options.rank + i * world;
    shard.push_back(q < remaining ? order[consumed + q] : order[(q - remaining) % size]);
  }
  return shard;
}

absl::StatusOr<std::unique_ptr<DistributedSampler>> DistributedSampler::Create(int64_t dataset_size,
                                                                               DistributedSamplerOptions options) {
  absl::Status valid = ValidateRankAndWorld(dataset_size, options.rank, options.num_replicas);
  if (!valid.ok()) return absl::InvalidArgumentError(absl::StrCat("DistributedSampler: ", valid.message()));
  return std::unique_ptr<DistributedSampler>(new DistributedSampler(dataset_size, options));
}

std::vector<int64_t> DistributedSampler::EpochIndices() const { return DistributedShard(size_, options_, epoch_, start_); }

int64_t DistributedSampler::Length() const {
  return ShardLength(size_ - start_, options_.num_replicas, options_.drop_last);
}

void DistributedSampler::SetEpoch(int64_t epoch) {
  epoch_ = epoch;
  start_ = 0;
}

SamplerState DistributedSampler::State(int64_t local_consumed) const {
  DDP_CHECK(local_consumed >= 0 && local_consumed <= Length())
      << "local_consumed " << local_consumed << " of " << Length();
  const int64_t remaining = size_ - start_;
  return SamplerState{options_.seed, epoch_, start_ + std::min(local_consumed * options_.num_replicas, remaining)};
}

absl::Status DistributedSampler::Restore(const SamplerState& state) {
  if (state.consumed < 0 || state.consumed > size_) {
    return absl::InvalidArgumentError(absl::StrCat("DistributedSampler::Restore: consumed ", state.consumed,
                                                   " is outside [0, ", size_, "] (the dataset size)"));
  }
  options_.seed = state.seed;
  epoch_ = state.epoch;
  start_ = state.consumed;
  return absl::OkStatus();
}

// ------------------------------------------------------------------------------- EvaluationSampler

absl::StatusOr<std::unique_ptr<EvaluationSampler>> EvaluationSampler::Create(int64_t dataset_size, int rank,
                                                                             int world_size) {
  absl::Status valid = ValidateRankAndWorld(dataset_size, rank, world_size);
  if (!valid.ok()) return absl::InvalidArgumentError(absl::StrCat("EvaluationSampler: ", valid.message()));
  return std::unique_ptr<EvaluationSampler>(new EvaluationSampler(dataset_size, rank, world_size));
}

std::vector<int64_t> EvaluationSampler::EpochIndices() const {
  return UnpaddedShard(EpochPermutation(size_, false, 0, 0), rank_, world_size_);
}

int64_t EvaluationSampler::Length() const {
  return size_ <= rank_ ? 0 : (size_ - rank_ + world_size_ - 1) / world_size_;
}

}  // namespace ddp
