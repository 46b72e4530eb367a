#include "bench/shm_floor.h"

#include <immintrin.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "comm/shm/shm_segment.h"
#include "base/check.h"

namespace ddp {
namespace {

constexpr size_t kControlBytes = 4096;
constexpr int kReady = 0;  // the rank's input of this step is in its buffer
constexpr int kDone = 1;   // it wrote its reduced slice into every buffer (and read them all) for this step

struct alignas(64) Word {
  std::atomic<uint32_t> value;
};

Word* Words(char* segment) { return reinterpret_cast<Word*>(segment); }

std::string SegmentKey(int rank) { return absl::StrCat("floor/", rank); }
std::string MappedKey(int rank) { return absl::StrCat("floor/mapped/", rank); }

// Rank r's slice [begin, end) of `count` floats: equal parts of whole cache lines, the last shorter.
std::pair<size_t, size_t> Slice(size_t count, int world, int r) {
  size_t per = (count + world - 1) / world;
  per = (per + 15) / 16 * 16;
  const size_t begin = std::min(count, per * r);
  return {begin, std::min(count, begin + per)};
}

}  // namespace

ShmFloor::ShmFloor(int rank, int world, size_t capacity, absl::Duration timeout)
    : rank_(rank), world_(world), capacity_(capacity), timeout_(timeout), segments_(world, nullptr) {}

ShmFloor::~ShmFloor() {
  for (char* segment : segments_) {
    if (segment != nullptr) munmap(segment, segment_bytes_);
  }
}

absl::StatusOr<std::unique_ptr<ShmFloor>> ShmFloor::Create(Store& store, int rank, int world,
                                                           size_t capacity_bytes, absl::Duration timeout) {
  std::unique_ptr<ShmFloor> self(new ShmFloor(rank, world, (capacity_bytes + 63) / 64 * 64, timeout));
  self->segment_bytes_ = kControlBytes + self->capacity_;
  const std::string name = absl::StrCat("/ddp-floor-", getpid(), "-", rank, "-", RandomShmSuffix());
  absl::StatusOr<char*> own = MapShmSegment(name, self->segment_bytes_, /*create=*/true);
  if (!own.ok()) return own.status();
  absl::Cleanup unlink_name = [&name] { shm_unlink(name.c_str()); };
  self->segments_[rank] = *own;
  if (absl::Status set = store.Set(SegmentKey(rank), name); !set.ok()) return set;
  for (int q = 0; q < world; ++q) {
    if (q == rank) continue;
    absl::StatusOr<std::string> peer_name = store.Get(SegmentKey(q), timeout);
    if (!peer_name.ok()) {
      return absl::UnavailableError(absl::StrCat("floor: rank ", q, " never published its segment: ",
                                                 peer_name.status().message()));
    }
    absl::StatusOr<char*> peer = MapShmSegment(*peer_name, self->segment_bytes_, /*create=*/false);
    if (!peer.ok()) return peer.status();
    self->segments_[q] = *peer;
  }
  if (absl::Status set = store.Set(MappedKey(rank), "1"); !set.ok()) return set;
  std::vector<std::string> mapped;
  for (int q = 0; q < world; ++q) mapped.push_back(MappedKey(q));
  if (absl::Status all = store.Wait(mapped, timeout); !all.ok()) {
    return absl::UnavailableError(absl::StrCat("floor: not every rank mapped the segments: ", all.message()));
  }
  return self;
}

float* ShmFloor::buffer() const { return reinterpret_cast<float*>(segments_[rank_] + kControlBytes); }

absl::Status ShmFloor::WaitFor(int peer, int word) {
  const std::atomic<uint32_t>& value = Words(segments_[peer])[word].value;
  absl::Time deadline = absl::InfiniteFuture();
  for (int i = 1; value.load(std::memory_order_acquire) < step_; ++i) {
    _mm_pause();
    if (i % 1024 != 0) continue;
    sched_yield();  // oversubscribed ranks (world > cores) must let the peer they wait for run
    const absl::Time now = absl::Now();
    if (deadline == absl::InfiniteFuture()) deadline = now + timeout_;
    if (now >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("floor all-reduce step ", step_, " on rank ", rank_,
                                                      ": rank ", peer, " did not post word ", word, " within ",
                                                      absl::FormatDuration(timeout_)));
    }
  }
  return absl::OkStatus();
}

absl::Status ShmFloor::AllReduce(size_t count) {
  if (count * sizeof(float) > capacity_) {
    return absl::InvalidArgumentError(absl::StrCat("floor: ", count, " floats exceed the segment's ", capacity_,
                                                   " bytes"));
  }
  ++step_;
  Word* own = Words(segments_[rank_]);
  auto data = [this](int q) { return reinterpret_cast<float*>(segments_[q] + kControlBytes); };
  own[kReady].value.store(step_, std::memory_order_release);
  for (int q = 0; q < world_; ++q) {
    if (q != rank_) DDP_RETURN_IF_ERROR(WaitFor(q, kReady));
  }
  const auto [begin, end] = Slice(count, world_, rank_);
  float* out = data(rank_);
  // Blocks of 4 KiB: reduced in L1, then written to this rank's buffer and to every peer's.
  constexpr size_t kBlock = 1024;
  for (size_t b = begin; b < end; b += kBlock) {
    const size_t e = std::min(end, b + kBlock);
    for (int q = 0; q < world_; ++q) {
      if (q == rank_) continue;
      const float* in = data(q);
      for (size_t i = b; i < e; ++i) out[i] += in[i];
    }
    for (int q = 0; q < world_; ++q) {
      if (q != rank_) std::memcpy(data(q) + b, out + b, (e - b) * sizeof(float));
    }
  }
  own[kDone].value.store(step_, std::memory_order_release);
  for (int q = 0; q < world_; ++q) {
    if (q != rank_) DDP_RETURN_IF_ERROR(WaitFor(q, kDone));
  }
  return absl::OkStatus();
}

}  // namespace ddp
