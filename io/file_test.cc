// Atomic writes leave the old file whole when they fail (missing or read-only directory, a temporary
// that cannot be created, a full disk); verified reads reject truncated, extended and corrupt files.
#include "io/file.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/child_process.h"

namespace ddp {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// A fresh, empty directory for one test.
std::string FreshDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/file_test_" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// The contents of `path`, or "<unreadable>".
std::string Contents(const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadFile(path);
  return bytes.ok() ? *bytes : "<unreadable>";
}

TEST(FileTest, WriteAtomicallyCreatesAndReplaces) {
  const std::string path = FreshDir("write") + "/data.bin";
  ASSERT_TRUE(WriteFileAtomically(path, std::string("first\0bytes", 11)).ok());
  EXPECT_EQ(Contents(path), std::string("first\0bytes", 11));
  ASSERT_TRUE(WriteFileAtomically(path, "second").ok());
  EXPECT_EQ(Contents(path), "second");
  ASSERT_TRUE(WriteFileAtomically(path, "").ok());
  EXPECT_EQ(Contents(path), "");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(FileTest, MissingDirectoryIsNotFoundNamingThePath) {
  const std::string path = FreshDir("missing") + "/no_such_dir/data.bin";
  const absl::Status status = WriteFileAtomically(path, "x");
  EXPECT_TRUE(absl::IsNotFound(status)) << status;
  EXPECT_EQ(status.message(), "cannot create " + path + ".tmp: No such file or directory");
  const absl::StatusOr<std::string> read = ReadFile(path);
  EXPECT_TRUE(absl::IsNotFound(read.status())) << read.status();
  EXPECT_EQ(read.status().message(), "cannot open " + path + ": No such file or directory");
}

// The temporary cannot be created (a directory stands where it goes; works as root): the old file stays.
TEST(FileTest, FailedCreateKeepsTheOldFile) {
  const std::string path = FreshDir("create") + "/data.bin";
  ASSERT_TRUE(WriteFileAtomically(path, "old").ok());
  fs::create_directory(path + ".tmp");
  const absl::Status status = WriteFileAtomically(path, "new");
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr(path + ".tmp: Is a directory"));
  EXPECT_EQ(Contents(path), "old");
}

// The disk fills up in the middle of the write: the old file stays and no temporary is left.
TEST(FileTest, FailedWriteKeepsTheOldFileAndRemovesTheTemporary) {
  const std::string path = FreshDir("full") + "/data.bin";
  ASSERT_TRUE(WriteFileAtomically(path, "old").ok());
  const ChildRun child = RunInChild([] { return LimitFileSize(64 << 10); },
                                    [&] { return WriteFileAtomically(path, std::string(1 << 20, 'x')); });
  ASSERT_FALSE(child.skipped) << child.status;
  EXPECT_FALSE(child.status.ok());
  EXPECT_EQ(child.status.message(), "cannot write " + path + ".tmp: File too large");
  EXPECT_EQ(Contents(path), "old");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(FileTest, ReadOnlyDirectoryKeepsTheOldFile) {
  const std::string dir = FreshDir("read_only");
  const std::string path = dir + "/data.bin";
  ASSERT_TRUE(WriteFileAtomically(path, "old").ok());
  const ChildRun child =
      RunInChild([&] { return MakeDirectoryReadOnly(dir); }, [&] { return WriteFileAtomically(path, "new"); });
  ::chmod(dir.c_str(), 0755);
  if (child.skipped) GTEST_SKIP() << "cannot make a read-only directory: " << child.status.message();
  EXPECT_TRUE(absl::IsPermissionDenied(child.status)) << child.status;
  EXPECT_THAT(std::string(child.status.message()), HasSubstr("cannot create " + path + ".tmp: "));
  EXPECT_EQ(Contents(path), "old");
}

// A symbolic link is written through, as torch.save and shell redirection do: the link stays a link and
// the file it points to (relative to the link's directory, through a chain of links) gets the bytes; a
// link to a missing file creates that file.
TEST(FileTest, WriteAtomicallyWritesThroughSymbolicLinks) {
  const std::string dir = FreshDir("links");
  fs::create_directory(dir + "/real");
  ASSERT_TRUE(WriteFileAtomically(dir + "/real/w.bin", "old").ok());
  fs::create_symlink("real/w.bin", dir + "/link1");
  fs::create_symlink(dir + "/link1", dir + "/link2");
  ASSERT_TRUE(WriteFileAtomically(dir + "/link2", "new").ok());
  EXPECT_TRUE(fs::is_symlink(dir + "/link2"));
  EXPECT_TRUE(fs::is_symlink(dir + "/link1"));
  EXPECT_EQ(Contents(dir + "/real/w.bin"), "new");
  EXPECT_FALSE(fs::exists(dir + "/real/w.bin.tmp"));
  EXPECT_FALSE(fs::exists(dir + "/link2.tmp"));
  fs::create_symlink("real/missing.bin", dir + "/dangling");
  ASSERT_TRUE(WriteFileAtomically(dir + "/dangling", "created").ok());
  EXPECT_TRUE(fs::is_symlink(dir + "/dangling"));
  EXPECT_EQ(Contents(dir + "/real/missing.bin"), "created");
  fs::create_symlink("loop_b", dir + "/loop_a");
  fs::create_symlink("loop_a", dir + "/loop_b");
  const absl::Status loop = WriteFileAtomically(dir + "/loop_a", "x");
  EXPECT_EQ(loop.message(), "cannot resolve " + dir + "/loop_a: Too many levels of symbolic links");
}

// A reader takes regular files only, through links: a FIFO nobody writes is refused at once instead of
// blocking the read forever, and a device such as /dev/zero instead of growing without end.
TEST(FileTest, ReadFileRefusesWhatIsNotARegularFile) {
  const std::string dir = FreshDir("read_special");
  ASSERT_EQ(::mkfifo((dir + "/fifo").c_str(), 0644), 0);
  absl::StatusOr<std::string> bytes = ReadFile(dir + "/fifo");
  ASSERT_FALSE(bytes.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(bytes.status())) << bytes.status();
  EXPECT_EQ(bytes.status().message(), "cannot read " + dir + "/fifo: it is a FIFO, not a regular file");
  EXPECT_EQ(CheckReadableFile(dir + "/fifo").message(), bytes.status().message());
  EXPECT_EQ(ReadFile("/dev/zero").status().message(),
            "cannot read /dev/zero: it is a character device, not a regular file");
  EXPECT_EQ(ReadFile(dir).status().message(),
            "cannot read " + dir + ": it is a directory, not a regular file");
  EXPECT_TRUE(absl::IsNotFound(ReadFile(dir + "/missing").status()));
  EXPECT_TRUE(absl::IsNotFound(CheckReadableFile(dir + "/missing")));
  ASSERT_TRUE(WriteFileAtomically(dir + "/data", "abc").ok());
  fs::create_symlink("data", dir + "/to_data");
  EXPECT_TRUE(CheckReadableFile(dir + "/to_data").ok());
  EXPECT_EQ(Contents(dir + "/to_data"), "abc");
}

TEST(FileTest, ReadFileAndMapFileGiveTheWholeFile) {
  const std::string dir = FreshDir("read_whole");
  std::string big(3 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131 + (i >> 12));
  ASSERT_TRUE(WriteFileAtomically(dir + "/big", big).ok());
  ASSERT_TRUE(WriteFileAtomically(dir + "/empty", "").ok());
  EXPECT_EQ(*ReadFile(dir + "/big"), big);
  EXPECT_EQ(*ReadFile(dir + "/empty"), "");
  // A file whose size fstat does not know (procfs says 0) is read to its end all the same.
  EXPECT_NE(ReadFile("/proc/self/status")->find("VmRSS"), std::string::npos);
  absl::StatusOr<std::shared_ptr<const MappedFile>> mapped = MapFile(dir + "/big");
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  EXPECT_EQ((*mapped)->bytes(), big);
  const_cast<char*>((*mapped)->bytes().data())[5] ^= 1;  // private: the file keeps its byte
  EXPECT_EQ(*ReadFile(dir + "/big"), big);
  EXPECT_EQ((*MapFile(dir + "/empty"))->bytes(), "");
  ASSERT_EQ(::mkfifo((dir + "/fifo").c_str(), 0644), 0);
  EXPECT_EQ(MapFile(dir + "/fifo").status().message(),
            "cannot read " + dir + "/fifo: it is a FIFO, not a regular file");
  EXPECT_TRUE(absl::IsNotFound(MapFile(dir + "/missing").status()));
}

// What is not a regular file (a FIFO, a socket, a directory, and through a link) is refused by name and
// left as it was: renaming over it would replace it with a regular file.
TEST(FileTest, WriteAtomicallyRefusesWhatIsNotARegularFile) {
  const std::string dir = FreshDir("special");
  ASSERT_EQ(::mkfifo((dir + "/fifo").c_str(), 0644), 0);
  absl::Status status = WriteFileAtomically(dir + "/fifo", "x");
  EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
  EXPECT_EQ(status.message(), "cannot write " + dir + "/fifo: it is a FIFO, not a regular file");
  EXPECT_TRUE(fs::is_fifo(dir + "/fifo"));
  EXPECT_FALSE(fs::exists(dir + "/fifo.tmp"));
  fs::create_symlink("fifo", dir + "/to_fifo");
  status = WriteFileAtomically(dir + "/to_fifo", "x");
  EXPECT_EQ(status.message(), "cannot write " + dir + "/fifo (the target of " + dir +
                                  "/to_fifo): it is a FIFO, not a regular file");
  EXPECT_TRUE(fs::is_fifo(dir + "/fifo"));
  fs::create_directory(dir + "/sub");
  status = WriteFileAtomically(dir + "/sub", "x");
  EXPECT_EQ(status.message(), "cannot write " + dir + "/sub: it is a directory, not a regular file");
  EXPECT_TRUE(fs::is_directory(dir + "/sub"));
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  char short_dir[] = "/tmp/file_test_XXXXXX";  // a socket's path must fit sun_path (108 bytes)
  ASSERT_NE(::mkdtemp(short_dir), nullptr);
  const std::string socket_path = std::string(short_dir) + "/sock";
  ASSERT_LT(socket_path.size(), sizeof(address.sun_path));
  socket_path.copy(address.sun_path, socket_path.size());
  ASSERT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0);
  status = WriteFileAtomically(socket_path, "x");
  ::close(fd);
  EXPECT_EQ(status.message(), "cannot write " + socket_path + ": it is a socket, not a regular file");
  EXPECT_TRUE(fs::is_socket(socket_path));
  fs::remove_all(short_dir);
}

// A stale temporary that is a link is removed, never written through: the file it points to keeps its
// bytes.
TEST(FileTest, AStaleTemporaryLinkIsNotFollowed) {
  const std::string dir = FreshDir("stale_tmp");
  ASSERT_TRUE(WriteFileAtomically(dir + "/victim", "keep").ok());
  fs::create_symlink(dir + "/victim", dir + "/out.bin.tmp");
  ASSERT_TRUE(WriteFileAtomically(dir + "/out.bin", "new").ok());
  EXPECT_EQ(Contents(dir + "/victim"), "keep");
  EXPECT_EQ(Contents(dir + "/out.bin"), "new");
  EXPECT_FALSE(fs::exists(dir + "/out.bin.tmp"));
}

TEST(FileTest, VerifiedReadAcceptsTheFileItWasGiven) {
  const std::string path = FreshDir("verified") + "/data.bin";
  const std::string bytes = "0123456789abcdef";
  ASSERT_TRUE(WriteFileAtomically(path, bytes).ok());
  const absl::StatusOr<std::string> read = ReadFileVerified(path, FingerprintOf(bytes));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, bytes);
  EXPECT_EQ(FingerprintOf(bytes).size, bytes.size());
}

TEST(FileTest, VerifiedReadRejectsTruncationExtensionAndCorruption) {
  const std::string path = FreshDir("damaged") + "/data.bin";
  const std::string bytes = "0123456789abcdef";
  const FileFingerprint expected = FingerprintOf(bytes);
  ASSERT_TRUE(WriteFileAtomically(path, bytes.substr(0, 10)).ok());
  absl::Status status = ReadFileVerified(path, expected).status();
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_EQ(status.message(), path + ": truncated or extended: 10 bytes, expected 16");
  ASSERT_TRUE(WriteFileAtomically(path, bytes + "!").ok());
  status = ReadFileVerified(path, expected).status();
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("17 bytes, expected 16"));
  std::string flipped = bytes;
  flipped[3] ^= 0x01;
  ASSERT_TRUE(WriteFileAtomically(path, flipped).ok());
  status = ReadFileVerified(path, expected).status();
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(path + ": checksum mismatch (corrupt)"));
  EXPECT_TRUE(absl::IsNotFound(ReadFileVerified(path + ".gone", expected).status()));
}

TEST(FileTest, FsyncDirectoryNamesAMissingDirectory) {
  const std::string dir = FreshDir("fsync");
  EXPECT_TRUE(FsyncDirectory(dir).ok());
  const absl::Status status = FsyncDirectory(dir + "/gone");
  EXPECT_TRUE(absl::IsNotFound(status)) << status;
  EXPECT_EQ(status.message(), "cannot open directory " + dir + "/gone: No such file or directory");
}

}  // namespace
}  // namespace ddp
