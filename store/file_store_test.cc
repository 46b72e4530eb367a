// FileStore beyond the shared Store suite: several processes, corrupt and foreign files, URLs.
#include "store/file_store.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "store/file_store_log.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;

std::string FreshPath(absl::string_view name) {
  std::string path = absl::StrCat(::testing::TempDir(), "/file_store_test_", ::getpid(), "_", name);
  ::unlink(path.c_str());
  return path;
}

void AppendRaw(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::app);
  out << bytes;
}

TEST(FileStoreTest, TwoProcessesShareCountersAndKeys) {
  const std::string path = FreshPath("two_procs");
  constexpr int kAdds = 200;
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // Only async-signal-safe-ish work, then _exit: no gtest in the child.
    auto store = FileStore::Create(path);
    bool ok = store.ok();
    for (int i = 0; ok && i < kAdds; ++i) ok = (*store)->Add("counter", 1).ok();
    ok = ok && (*store)->Set("child_done", "yes").ok();
    ::_exit(ok ? 0 : 1);
  }
  auto store = FileStore::Create(path);
  ASSERT_TRUE(store.ok()) << store.status();
  for (int i = 0; i < kAdds; ++i) ASSERT_TRUE((*store)->Add("counter", 1).ok());
  EXPECT_EQ(*(*store)->Get("child_done", absl::Seconds(20)), "yes");
  int wstatus = 0;
  ASSERT_EQ(::waitpid(child, &wstatus, 0), child);
  EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
  EXPECT_EQ(*(*store)->Get("counter", absl::Seconds(1)), absl::StrCat(2 * kAdds));
  ::unlink(path.c_str());
}

TEST(FileStoreTest, ForeignFileIsRejected) {
  const std::string path = FreshPath("foreign");
  AppendRaw(path, "hello, I am a text file\n");
  auto store = FileStore::Create(path);
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(), HasSubstr("not a file store"));
  ::unlink(path.c_str());
}

TEST(FileStoreTest, CorruptRecordIsReportedWithItsOffset) {
  const std::string path = FreshPath("corrupt");
  auto store = FileStore::Create(path);
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->Set("good", "1").ok());
  std::string record = EncodeFileRecord(FileRecordKind::kSet, "bad", "2");
  record[record.size() - 1] ^= 0x5a;  // Break the checksum.
  AppendRaw(path, record);
  absl::StatusOr<int64_t> n = (*store)->NumKeys();
  ASSERT_EQ(n.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(n.status().message(), HasSubstr("offset"));
  // A fresh reader of the same file sees the same corruption.
  EXPECT_EQ(FileStore::Create(path).status().code(), absl::StatusCode::kDataLoss);
  ::unlink(path.c_str());
}

TEST(FileStoreTest, TruncatedRecordIsCorruption) {
  const std::string path = FreshPath("truncated");
  ASSERT_TRUE(FileStore::Create(path).ok());
  const std::string record = EncodeFileRecord(FileRecordKind::kSet, "key", "value");
  AppendRaw(path, record.substr(0, record.size() - 3));
  EXPECT_EQ(FileStore::Create(path).status().code(), absl::StatusCode::kDataLoss);
  ::unlink(path.c_str());
}

TEST(FileStoreTest, HugeLengthFieldIsCorruptionNotAnAllocation) {
  const std::string path = FreshPath("huge");
  ASSERT_TRUE(FileStore::Create(path).ok());
  AppendRaw(path, std::string("\x01\xff\xff\xff\x7f", 5));
  EXPECT_EQ(FileStore::Create(path).status().code(), absl::StatusCode::kDataLoss);
  ::unlink(path.c_str());
}

TEST(FileStoreTest, LogReplaysDeletes) {
  const std::string path = FreshPath("replay");
  {
    auto store = FileStore::Create(path);
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->Set("a", "1").ok());
    ASSERT_TRUE((*store)->Set("b", "2").ok());
    ASSERT_TRUE(*(*store)->DeleteKey("a"));
  }
  auto reopened = FileStore::Create(path);
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ(*(*reopened)->NumKeys(), 1);
  EXPECT_EQ(*(*reopened)->Get("b", absl::Seconds(1)), "2");
  ::unlink(path.c_str());
}

TEST(FileStoreTest, PathFromUrl) {
  EXPECT_EQ(*FileStore::PathFromUrl("file:///tmp/x"), "/tmp/x");
  EXPECT_FALSE(FileStore::PathFromUrl("file://relative").ok());
  EXPECT_FALSE(FileStore::PathFromUrl("tcp://host:1").ok());
  EXPECT_FALSE(FileStore::PathFromUrl("file:///").ok());
}

TEST(FileStoreTest, UnopenablePathIsAnError) {
  EXPECT_FALSE(FileStore::Create("/nonexistent_dir_for_ddp/store").ok());
}

}  // namespace
}  // namespace ddp
