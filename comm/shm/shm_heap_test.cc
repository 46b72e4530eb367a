#include "comm/shm/shm_heap.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace ddp {
namespace {

std::shared_ptr<ShmHeap> NewHeap() {
  absl::StatusOr<std::shared_ptr<ShmHeap>> heap = ShmHeap::Create();
  EXPECT_TRUE(heap.ok()) << heap.status();
  return *heap;
}

TEST(ShmHeapTest, BlocksArePageAlignedDisjointAndInsideTheHeap) {
  std::shared_ptr<ShmHeap> heap = NewHeap();
  std::vector<char*> blocks;
  for (size_t bytes : {1, 4096, 5000, 1 << 20}) {
    absl::StatusOr<char*> block = heap->Allocate(bytes);
    ASSERT_TRUE(block.ok()) << block.status();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(*block) % 4096, 0u);
    EXPECT_GE(heap->OffsetOf(*block, bytes), 0);
    std::memset(*block, static_cast<int>(blocks.size() + 1), bytes);
    blocks.push_back(*block);
  }
  // Disjoint: every block still holds its own fill byte at its first and last byte.
  const size_t sizes[] = {1, 4096, 5000, 1 << 20};
  for (size_t i = 0; i < blocks.size(); ++i) {
    EXPECT_EQ(blocks[i][0], static_cast<char>(i + 1));
    EXPECT_EQ(blocks[i][sizes[i] - 1], static_cast<char>(i + 1));
  }
  EXPECT_EQ(heap->committed_bytes(), 4096u + 4096u + 8192u + (1u << 20));
  int local = 0;
  EXPECT_EQ(heap->OffsetOf(&local, sizeof(local)), -1);
  EXPECT_EQ(heap->OffsetOf(blocks[3], (1 << 20) + 1), -1);  // runs past the committed end
}

TEST(ShmHeapTest, FreedBlocksAreCoalescedAndReused) {
  std::shared_ptr<ShmHeap> heap = NewHeap();
  char* a = *heap->Allocate(4096);
  char* b = *heap->Allocate(4096);
  char* c = *heap->Allocate(4096);
  heap->Free(a);
  heap->Free(b);
  // a and b coalesced: an 8 KiB block fits where they were, without growing.
  char* d = *heap->Allocate(8192);
  EXPECT_EQ(d, a);
  EXPECT_EQ(heap->committed_bytes(), 3 * 4096u);
  heap->Free(c);
  // c was the last block: a larger request grows from c's start instead of past it.
  char* e = *heap->Allocate(3 * 4096);
  EXPECT_EQ(e, c);
  EXPECT_EQ(heap->committed_bytes(), 5 * 4096u);
  heap->Free(d);
  heap->Free(e);
}

// st_blocks (512-byte units) of the memfd: the memory it holds.
size_t ResidentBytes(const ShmHeap& heap) {
  struct stat st {};
  EXPECT_EQ(fstat(heap.fd(), &st), 0);
  return static_cast<size_t>(st.st_blocks) * 512;
}

TEST(ShmHeapTest, FreeingALargeBlockGivesItsMemoryBack) {
  std::shared_ptr<ShmHeap> heap = NewHeap();
  char* small = *heap->Allocate(4096);
  char* large = *heap->Allocate(8 << 20);
  std::memset(small, 1, 4096);
  std::memset(large, 1, 8 << 20);
  EXPECT_GE(ResidentBytes(*heap), (8u << 20) + 4096u);
  heap->Free(large);
  EXPECT_LT(ResidentBytes(*heap), 1u << 20);  // the 8 MiB went back; the small block stays
  EXPECT_EQ(small[0], 1);
  char* again = *heap->Allocate(8 << 20);  // reused in place, fresh (zero) pages
  EXPECT_EQ(again, large);
  EXPECT_EQ(again[12345], 0);
  EXPECT_EQ(heap->committed_bytes(), (8u << 20) + 4096u);  // the memfd's size is unchanged
}

// A block's memory is held from Allocate on, before anything touches it: a system that cannot give it
// refuses the allocation instead of a SIGBUS at the first write. Also for a block reused where Free gave
// the memory back.
TEST(ShmHeapTest, AllocateReservesTheBlocksMemoryBeforeItIsTouched) {
  std::shared_ptr<ShmHeap> heap = NewHeap();
  char* large = *heap->Allocate(8 << 20);
  EXPECT_GE(ResidentBytes(*heap), 8u << 20);
  heap->Free(large);
  EXPECT_LT(ResidentBytes(*heap), 1u << 20);
  char* again = *heap->Allocate(4 << 20);
  EXPECT_EQ(again, large);
  EXPECT_GE(ResidentBytes(*heap), 4u << 20);
}

TEST(ShmHeapTest, APeerReadsAndWritesTheOwnersBlocksAndFollowsItsGrowth) {
  std::shared_ptr<ShmHeap> heap = NewHeap();
  char* first = *heap->Allocate(100);
  std::strcpy(first, "written by the owner");
  PeerHeap peer;
  ASSERT_TRUE(peer.Open(getpid(), heap->fd()).ok());
  absl::StatusOr<const char*> seen = peer.At(heap->OffsetOf(first, 100), 100);
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_NE(*seen, first);  // another mapping of the same memory
  EXPECT_STREQ(*seen, "written by the owner");
  // The heap grows after the peer mapped it: the peer maps the rest on demand.
  char* second = *heap->Allocate(3 << 20);
  second[(3 << 20) - 1] = 42;
  seen = peer.At(heap->OffsetOf(second, 3 << 20), 3 << 20);
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ((*seen)[(3 << 20) - 1], 42);
  const_cast<char*>(*seen)[0] = 7;  // writes through the peer's mapping reach the owner
  EXPECT_EQ(second[0], 7);
}

TEST(ShmHeapTest, APeerRefusesRangesBeyondTheOwnersHeapAndUnknownDescriptors) {
  std::shared_ptr<ShmHeap> heap = NewHeap();
  ASSERT_TRUE(heap->Allocate(4096).ok());
  PeerHeap peer;
  ASSERT_TRUE(peer.Open(getpid(), heap->fd()).ok());
  absl::StatusOr<const char*> beyond = peer.At(4096, 1);
  EXPECT_EQ(beyond.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(beyond.status().message().find("fewer than"), std::string::npos) << beyond.status();
  PeerHeap nobody;
  absl::Status missing = nobody.Open(getpid(), 1 << 20);
  EXPECT_EQ(missing.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(missing.message().find("/proc/"), std::string::npos) << missing;
}

}  // namespace
}  // namespace ddp
