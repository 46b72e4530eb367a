// The CPU allocator's huge-page advice (Note [Huge pages for the heap], tensor/storage.cc): a large block's
// memory lies in a mapping advised MADV_HUGEPAGE ("hg" in /proc/self/smaps' VmFlags), unless
// DDP_CPU_HUGE_PAGES=0 turned the advice off; either way the block holds what is written to it.
#include "tensor/storage.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace ddp {
namespace {

constexpr size_t kBlockBytes = size_t{64} << 20;

// True when this kernel offers transparent huge pages to programs that ask ("always" or "madvise").
bool KernelOffersHugePages() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  return std::getline(in, line) && line.find("[never]") == std::string::npos;
}

// The VmFlags of the mapping holding `address` in /proc/self/smaps ("" if none is found).
std::string VmFlagsAt(const void* address) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(address);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream range(line);
    if (range >> std::hex >> begin >> dash >> end && dash == '-') {
      inside = begin <= a && a < end;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

bool AdvisedHuge(const std::string& vm_flags) { return vm_flags.find(" hg") != std::string::npos; }

// A 64 MiB block written at both ends and read back; returns its mapping's VmFlags at the middle.
std::string FlagsOfNewBlock() {
  Storage block = NewStorage(kBlockBytes, Device{});
  auto* bytes = static_cast<unsigned char*>(block->data());
  std::memset(bytes, 0x5a, kBlockBytes);
  EXPECT_EQ(bytes[0], 0x5a);
  EXPECT_EQ(bytes[kBlockBytes - 1], 0x5a);
  return VmFlagsAt(bytes + kBlockBytes / 2);
}

TEST(CpuAllocatorTest, LargeBlocksLieInMemoryAdvisedForHugePages) {
  if (!KernelOffersHugePages()) GTEST_SKIP() << "this kernel's transparent huge pages are off or absent";
  const char* setting = std::getenv("DDP_CPU_HUGE_PAGES");
  if (setting != nullptr && std::strcmp(setting, "0") == 0) GTEST_SKIP() << "DDP_CPU_HUGE_PAGES=0 is set";
  const std::string flags = FlagsOfNewBlock();
  ASSERT_FALSE(flags.empty()) << "no mapping in /proc/self/smaps holds the block";
  EXPECT_TRUE(AdvisedHuge(flags)) << flags;
}

TEST(CpuAllocatorDeathTest, HugePagesOffLeavesTheHeapUnadvised) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the child runs this test alone, from a fresh start
  EXPECT_EXIT(
      {
        setenv("DDP_CPU_HUGE_PAGES", "0", 1);
        const std::string flags = FlagsOfNewBlock();
        std::exit(flags.empty() ? 2 : AdvisedHuge(flags) ? 1 : 0);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace ddp
