// Samplers: torch's DistributedSampler layout for many (size, world, drop_last), per-epoch orders, the
// evaluation sampler's exact partition, and resumption at many positions and across world sizes.
#include "data/sampler.h"

#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <set>

namespace ddp {
namespace {

DistributedSamplerOptions Options(int world, int rank, bool shuffle, bool drop_last, uint64_t seed = 3) {
  DistributedSamplerOptions options;
  options.num_replicas = world;
  options.rank = rank;
  options.shuffle = shuffle;
  options.drop_last = drop_last;
  options.seed = seed;
  return options;
}

// torch.utils.data.DistributedSampler.__iter__, transcribed literally.
std::vector<int64_t> TorchReference(std::vector<int64_t> indices, int world, int rank, bool drop_last) {
  const int64_t n = static_cast<int64_t>(indices.size());
  int64_t num_samples;
  if (drop_last && n % world != 0) {
    num_samples = (n - world) <= 0 ? 0 : (n - world + world - 1) / world;  // ceil((n - W) / W)
  } else {
    num_samples = (n + world - 1) / world;
  }
  const int64_t total = num_samples * world;
  if (!drop_last) {
    const int64_t padding = total - n;
    std::vector<int64_t> head = indices;
    if (padding <= n) {
      indices.insert(indices.end(), head.begin(), head.begin() + padding);
    } else {
      std::vector<int64_t> repeated;
      for (int64_t k = 0; k < (padding + n - 1) / n; ++k) repeated.insert(repeated.end(), head.begin(), head.end());
      indices.insert(indices.end(), repeated.begin(), repeated.begin() + padding);
    }
  } else {
    indices.resize(total);
  }
  std::vector<int64_t> shard;
  for (int64_t i = rank; i < total; i += world) shard.push_back(indices[i]);
  return shard;
}

TEST(SamplerTest, DistributedLayoutMatchesTorchForManyCombinations) {
  for (int64_t size : {0, 1, 2, 3, 5, 7, 10, 16, 17, 31, 100, 101}) {
    for (int world : {1, 2, 3, 4, 5, 8, 13}) {
      for (bool drop_last : {false, true}) {
        for (bool shuffle : {false, true}) {
          SCOPED_TRACE(testing::Message() << "size " << size << " world " << world << " drop_last " << drop_last
                                          << " shuffle " << shuffle);
          const std::vector<int64_t> order = EpochPermutation(size, shuffle, 3, 1);
          std::multiset<int64_t> all;
          const int64_t expected_count = drop_last ? size / world : (size + world - 1) / world;
          for (int rank = 0; rank < world; ++rank) {
            auto sampler = DistributedSampler::Create(size, Options(world, rank, shuffle, drop_last));
            ASSERT_TRUE(sampler.ok());
            (*sampler)->SetEpoch(1);
            const std::vector<int64_t> shard = (*sampler)->EpochIndices();
            EXPECT_EQ(shard, TorchReference(order, world, rank, drop_last));
            EXPECT_EQ(static_cast<int64_t>(shard.size()), expected_count);  // equal counts
            EXPECT_EQ((*sampler)->Length(), expected_count);
            all.insert(shard.begin(), shard.end());
          }
          std::map<int64_t, int> multiplicity;
          for (int64_t i : all) ++multiplicity[i];
          if (drop_last) {
            // Disjoint, and exactly the first size - size % world samples of the order.
            EXPECT_EQ(all.size(), static_cast<size_t>(size / world * world));
            for (int64_t p = 0; p < size / world * world; ++p) EXPECT_EQ(multiplicity[order[p]], 1);
          } else {
            // Coverage; the padding repeats the order's head, cyclically.
            const int64_t total = expected_count * world;
            EXPECT_EQ(static_cast<int64_t>(all.size()), total);
            for (int64_t p = 0; p < size; ++p) {
              const int64_t expected = size == 0 ? 0 : total / size + (p < total % size ? 1 : 0);
              EXPECT_EQ(multiplicity[order[p]], expected) << "position " << p;
            }
          }
        }
      }
    }
  }
}

TEST(SamplerTest, PaddingRepeatsTheHeadExactly) {
  // 5 samples, 2 ranks, no shuffle: padded order 0 1 2 3 4 0.
  EXPECT_EQ(DistributedShard(5, Options(2, 0, false, false), 0), (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(DistributedShard(5, Options(2, 1, false, false), 0), (std::vector<int64_t>{1, 3, 0}));
  // Resumed after 2 samples (3 remain: 2 3 4), padded with the epoch's head: 2 3 4 0.
  EXPECT_EQ(DistributedShard(5, Options(2, 1, false, false), 0, 2), (std::vector<int64_t>{3, 0}));
  // drop_last drops sample 4.
  EXPECT_EQ(DistributedShard(5, Options(2, 1, false, true), 0), (std::vector<int64_t>{1, 3}));
  // 2 samples, 5 ranks: 0 1 0 1 0.
  for (int rank = 0; rank < 5; ++rank) {
    EXPECT_EQ(DistributedShard(2, Options(5, rank, false, false), 0), (std::vector<int64_t>{rank % 2}));
  }
}

TEST(SamplerTest, SetEpochGivesANewOrderSameOnEveryRank) {
  auto a = *DistributedSampler::Create(1000, Options(1, 0, true, false));
  std::vector<int64_t> e0 = a->EpochIndices();
  a->SetEpoch(1);
  std::vector<int64_t> e1 = a->EpochIndices();
  EXPECT_NE(e0, e1);
  a->SetEpoch(0);
  EXPECT_EQ(a->EpochIndices(), e0);  // a function of (seed, epoch) only
  // Ranks of a world of 4 together hold the epoch's global order, interleaved.
  for (int64_t epoch : {0, 1, 7}) {
    std::vector<int64_t> global = EpochPermutation(1000, true, 3, epoch);
    for (int rank = 0; rank < 4; ++rank) {
      auto s = *DistributedSampler::Create(1000, Options(4, rank, true, false));
      s->SetEpoch(epoch);
      std::vector<int64_t> shard = s->EpochIndices();
      for (size_t i = 0; i < shard.size(); ++i) ASSERT_EQ(shard[i], global[rank + 4 * i]);
    }
  }
  EXPECT_NE(EpochPermutation(100, true, 1, 0), EpochPermutation(100, true, 2, 0));  // the seed matters
}

TEST(SamplerTest, BadOptionsAreErrors) {
  EXPECT_NE(DistributedSampler::Create(10, Options(2, 2, true, false)).status().message().find("rank must be in [0, 2)"),
            std::string::npos);
  EXPECT_FALSE(DistributedSampler::Create(10, Options(0, 0, true, false)).ok());
  EXPECT_FALSE(EvaluationSampler::Create(10, -1, 2).ok());
}

TEST(SamplerTest, EvaluationSamplerPartitionsExactly) {
  for (int64_t size : {0, 1, 5, 10, 99, 1000}) {
    for (int world : {1, 2, 3, 4, 7, 16}) {
      std::vector<int> seen(size, 0);
      int64_t min_count = size, max_count = 0;
      for (int rank = 0; rank < world; ++rank) {
        auto s = *EvaluationSampler::Create(size, rank, world);
        std::vector<int64_t> shard = s->EpochIndices();
        EXPECT_EQ(static_cast<int64_t>(shard.size()), s->Length());
        min_count = std::min<int64_t>(min_count, shard.size());
        max_count = std::max<int64_t>(max_count, shard.size());
        for (int64_t i : shard) ++seen[i];
      }
      for (int64_t i = 0; i < size; ++i) EXPECT_EQ(seen[i], 1) << "sample " << i << " size " << size << " world " << world;
      EXPECT_LE(max_count - min_count, 1);
    }
  }
}

TEST(SamplerTest, SequentialRandomAndBatchSamplers) {
  SequentialSampler sequential(5);
  EXPECT_EQ(sequential.EpochIndices(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  RandomSampler random(50, 9);
  std::vector<int64_t> order = random.EpochIndices();
  std::vector<int64_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, EpochPermutation(50, false, 0, 0));
  EXPECT_EQ(RandomSampler(50, 9).EpochIndices(), order);
  random.SetEpoch(1);
  EXPECT_NE(random.EpochIndices(), order);
  BatchSampler batches(&sequential, 2, false);
  EXPECT_EQ(batches.EpochBatches(), (std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}, {4}}));
  EXPECT_EQ(batches.NumBatches(), 3);
  BatchSampler dropping(&sequential, 2, true);
  EXPECT_EQ(dropping.EpochBatches(), (std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(dropping.NumBatches(), 2);
}

TEST(SamplerTest, StateSerialisesAsTextAndBytes) {
  SamplerState state{12345678901234ull, 7, 4242};
  EXPECT_EQ(state.ToText(), "seed=12345678901234 epoch=7 consumed=4242");
  EXPECT_EQ(*SamplerState::FromText(state.ToText()), state);
  EXPECT_EQ(state.ToBytes().size(), 28u);
  EXPECT_EQ(*SamplerState::FromBytes(state.ToBytes()), state);
  EXPECT_FALSE(SamplerState::FromText("seed=1 epoch=x consumed=3").ok());
  EXPECT_FALSE(SamplerState::FromText("seed=1 epoch=2").ok());
  EXPECT_FALSE(SamplerState::FromBytes("DSS1").ok());
  EXPECT_FALSE(SamplerState::FromBytes(std::string(28, 'x')).ok());
  auto sampler = *DistributedSampler::Create(10, Options(1, 0, true, false));
  EXPECT_FALSE(sampler->Restore(SamplerState{0, 0, 11}).ok());
}

// Trains `steps` lockstep steps of `batch` samples per rank on world `w1` (or until the epoch ends),
// saves the state, resumes on world `w2` to the end of the epoch, and checks that the union of what was
// consumed is the epoch's order with every sample exactly once, plus only the padding torch adds.
void CheckResume(int64_t size, int w1, int64_t local_consumed, int w2, bool drop_last, bool shuffle) {
  SCOPED_TRACE(testing::Message() << "size " << size << " w1 " << w1 << " consumed/rank " << local_consumed << " w2 "
                                  << w2 << " drop_last " << drop_last << " shuffle " << shuffle);
  std::vector<int64_t> consumed_samples;
  SamplerState state;
  for (int rank = 0; rank < w1; ++rank) {
    auto s = *DistributedSampler::Create(size, Options(w1, rank, shuffle, drop_last, 11));
    s->SetEpoch(4);
    const int64_t k = std::min(local_consumed, s->Length());
    SamplerState mine = s->State(k);
    if (rank == 0) state = mine;
    EXPECT_EQ(mine, state);  // every rank saves the same state
    std::vector<int64_t> shard = s->EpochIndices();
    consumed_samples.insert(consumed_samples.end(), shard.begin(), shard.begin() + k);
  }
  // Through the serialised form, as a checkpoint would.
  state = *SamplerState::FromBytes(state.ToBytes());
  std::vector<int64_t> resumed_samples;
  for (int rank = 0; rank < w2; ++rank) {
    auto s = *DistributedSampler::Create(size, Options(w2, rank, shuffle, drop_last, 999));  // seed from state
    ASSERT_TRUE(s->Restore(state).ok());
    std::vector<int64_t> shard = s->EpochIndices();
    EXPECT_EQ(static_cast<int64_t>(shard.size()), s->Length());
    resumed_samples.insert(resumed_samples.end(), shard.begin(), shard.end());
  }
  // Before saving: the first min(k * w1, size) samples of the global order, plus (without drop_last) the
  // padding torch appends when the ranks went past its end. After resuming: the rest of the order, cut
  // (drop_last) or padded with the order's head to a multiple of w2. Nothing else, nothing twice.
  const std::vector<int64_t> order = EpochPermutation(size, shuffle, 11, 4);
  auto padding = [&](int64_t count) {
    std::vector<int64_t> pad;
    for (int64_t j = 0; j < count; ++j) pad.push_back(order[j % size]);
    return pad;
  };
  const int64_t k_total = static_cast<int64_t>(consumed_samples.size());
  EXPECT_EQ(state.consumed, std::min(k_total, size));
  std::vector<int64_t> want_consumed(order.begin(), order.begin() + state.consumed);
  for (int64_t i : padding(k_total - state.consumed)) want_consumed.push_back(i);
  const int64_t remaining = size - state.consumed;
  std::vector<int64_t> want_resumed;
  if (drop_last) {
    want_resumed.assign(order.begin() + state.consumed, order.begin() + state.consumed + remaining / w2 * w2);
  } else {
    want_resumed.assign(order.begin() + state.consumed, order.end());
    for (int64_t i : padding((remaining + w2 - 1) / w2 * w2 - remaining)) want_resumed.push_back(i);
  }
  auto as_multiset = [](const std::vector<int64_t>& v) { return std::multiset<int64_t>(v.begin(), v.end()); };
  EXPECT_EQ(as_multiset(consumed_samples), as_multiset(want_consumed));
  EXPECT_EQ(as_multiset(resumed_samples), as_multiset(want_resumed));
}

TEST(SamplerTest, ResumesAtManyPositionsAndAcrossWorldSizes) {
  for (int64_t size : {0, 1, 7, 10, 33, 100}) {
    for (int w1 : {1, 2, 3, 4}) {
      for (int w2 : {1, 2, 3, 5}) {
        for (bool drop_last : {false, true}) {
          const int64_t per_rank = drop_last ? size / w1 : (size + w1 - 1) / w1;
          for (int64_t k = 0; k <= per_rank; k += std::max<int64_t>(1, per_rank / 7)) {
            CheckResume(size, w1, k, w2, drop_last, /*shuffle=*/true);
          }
          CheckResume(size, w1, per_rank, w2, drop_last, /*shuffle=*/false);
        }
      }
    }
  }
}

TEST(SamplerTest, ResumingWithTheSameWorldContinuesTheSameShards) {
  // Without a world-size change, resuming after k samples per rank gives exactly the rest of each shard.
  for (int rank = 0; rank < 3; ++rank) {
    auto original = *DistributedSampler::Create(100, Options(3, rank, true, false));
    original->SetEpoch(2);
    std::vector<int64_t> full = original->EpochIndices();
    auto resumed = *DistributedSampler::Create(100, Options(3, rank, true, false));
    ASSERT_TRUE(resumed->Restore(original->State(10)).ok());
    EXPECT_EQ(resumed->EpochIndices(), std::vector<int64_t>(full.begin() + 10, full.end()));
    // Saving again from the resumed sampler counts from the epoch's start.
    EXPECT_EQ(resumed->State(5).consumed, 45);
  }
}

}  // namespace
}  // namespace ddp
