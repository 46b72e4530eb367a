// Note [Stored ZIP archives]: archives written here read back member for member, aligned; Python's
// zipfile reads what we write and we read what it writes (stored, with and without ZIP64); cuts, flipped
// bytes and what the reader refuses end in errors naming the archive and the member.
#include "io/zip_archive.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "testing/process.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;

std::vector<ZipMember> SomeMembers(std::string& storage) {
  storage.clear();
  for (int i = 0; i < 1000; ++i) storage.push_back(static_cast<char>(i * 7));
  const absl::string_view all(storage);
  return {{"archive/data.pkl", all.substr(0, 37)},
          {"archive/data/0", all.substr(37, 500)},
          {"archive/empty", all.substr(0, 0)},
          {"archive/data/1", all.substr(537)}};
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(ZipArchiveTest, WrittenArchivesReadBackAlignedWithAndWithoutZip64) {
  std::string storage;
  const std::vector<ZipMember> members = SomeMembers(storage);
  for (bool zip64 : {false, true}) {
    ZipWriteOptions options;
    options.force_zip64 = zip64;
    const std::string image = WriteZipArchive(members, options);
    EXPECT_EQ(image, WriteZipArchive(members, options)) << "the same members make the same bytes";
    absl::StatusOr<std::vector<ZipMember>> read = ReadZipArchive(image, "a.zip");
    ASSERT_TRUE(read.ok()) << read.status();
    ASSERT_EQ(read->size(), members.size());
    for (size_t i = 0; i < members.size(); ++i) {
      EXPECT_EQ((*read)[i].name, members[i].name);
      EXPECT_EQ((*read)[i].data, members[i].data);
      EXPECT_EQ(((*read)[i].data.data() - image.data()) % 64, 0) << members[i].name;
    }
    EXPECT_EQ(FindZipMember(*read, "archive/data/0")->data, members[1].data);
    EXPECT_EQ(FindZipMember(*read, "archive/data/2"), nullptr);
  }
}

// Python's zipfile (the standard library of the system python3) on our archives, and ours on its.
TEST(ZipArchiveTest, PythonsZipfileAndOursReadEachOther) {
  std::string storage;
  const std::vector<ZipMember> members = SomeMembers(storage);
  for (bool zip64 : {false, true}) {
    ZipWriteOptions options;
    options.force_zip64 = zip64;
    const std::string path = TempPath(zip64 ? "ours64.zip" : "ours.zip");
    WriteBytes(path, WriteZipArchive(members, options));
    const ProcessResult listed = RunProcess(
        {"/usr/bin/python3", "-c",
         "import sys, zipfile\n"
         "z = zipfile.ZipFile(sys.argv[1])\n"
         "assert z.testzip() is None\n"
         "print(' '.join('%s:%d:%d' % (i.filename, i.file_size, sum(z.read(i))) for i in z.infolist()))\n",
         path});
    ASSERT_EQ(listed.exit_code, 0) << listed.err;
    std::string expected;
    for (const ZipMember& m : members) {
      int sum = 0;
      for (char c : m.data) sum += static_cast<uint8_t>(c);
      expected += (expected.empty() ? "" : " ") + m.name + ":" + std::to_string(m.data.size()) + ":" +
                  std::to_string(sum);
    }
    EXPECT_EQ(listed.out, expected + "\n");
  }
  const std::string theirs = TempPath("theirs.zip");
  const ProcessResult written =
      RunProcess({"/usr/bin/python3", "-c",
                  "import sys, zipfile\n"
                  "with zipfile.ZipFile(sys.argv[1], 'w', zipfile.ZIP_STORED) as z:\n"
                  "  z.writestr('a/x', b'hello' * 100)\n"
                  "  with z.open('a/y', 'w', force_zip64=True) as f: f.write(bytes(range(256)))\n"
                  "  z.comment = b'a comment'\n",
                  theirs});
  ASSERT_EQ(written.exit_code, 0) << written.err;
  const std::string image = ReadBytes(theirs);
  absl::StatusOr<std::vector<ZipMember>> read = ReadZipArchive(image, theirs);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 2u);
  std::string hellos;
  for (int i = 0; i < 100; ++i) hellos += "hello";
  EXPECT_EQ((*read)[0].data, hellos);
  ASSERT_EQ((*read)[1].data.size(), 256u);
  EXPECT_EQ(static_cast<uint8_t>((*read)[1].data[255]), 255);

  const std::string deflated = TempPath("deflated.zip");
  ASSERT_EQ(RunProcess({"/usr/bin/python3", "-c",
                        "import sys, zipfile\n"
                        "with zipfile.ZipFile(sys.argv[1], 'w', zipfile.ZIP_DEFLATED) as z:\n"
                        "  z.writestr('a/x', b'hello' * 100)\n",
                        deflated})
                .exit_code,
            0);
  const std::string deflated_image = ReadBytes(deflated);
  absl::StatusOr<std::vector<ZipMember>> compressed = ReadZipArchive(deflated_image, "d.zip");
  ASSERT_TRUE(compressed.ok()) << compressed.status();
  EXPECT_EQ((*compressed)[0].compression_method, 8);  // listed, left to the caller
}

TEST(ZipArchiveTest, CutsAndFlippedBytesEndInNamedErrors) {
  std::string storage;
  const std::string image = WriteZipArchive(SomeMembers(storage));
  for (size_t cut = 0; cut < image.size(); ++cut) {
    absl::StatusOr<std::vector<ZipMember>> read = ReadZipArchive(image.substr(0, cut), "cut.zip");
    ASSERT_FALSE(read.ok()) << cut;
    EXPECT_THAT(read.status().message(), HasSubstr("cut.zip: not a readable ZIP archive: ")) << cut;
  }
  std::mt19937 random(11);
  int damaged_data = 0;
  for (int trial = 0; trial < 5000; ++trial) {
    std::string bytes = image;
    const size_t at = random() % bytes.size();
    bytes[at] = static_cast<char>(bytes[at] ^ (1 + random() % 255));
    absl::StatusOr<std::vector<ZipMember>> read = ReadZipArchive(bytes, "flip.zip");
    if (!read.ok()) {
      EXPECT_THAT(read.status().message(), HasSubstr("flip.zip: not a readable ZIP archive: "));
      damaged_data += read.status().message().find("CRC-32 mismatch") != std::string::npos ? 1 : 0;
      continue;
    }
    // A flip the reader let through changed no member's bytes (padding, a time field, ...).
    std::string again;
    const std::vector<ZipMember> members = SomeMembers(again);
    ASSERT_EQ(read->size(), members.size());
    for (size_t i = 0; i < members.size(); ++i) EXPECT_EQ((*read)[i].data, members[i].data) << at;
  }
  EXPECT_GT(damaged_data, 1000);  // most of the archive is member data, and every flip there is caught
}

TEST(ZipArchiveTest, RefusesWhatItDoesNotTake) {
  EXPECT_THAT(ReadZipArchive("not an archive at all, but long enough", "t.zip").status().message(),
              HasSubstr("t.zip: not a readable ZIP archive: no end of central directory record"));
  std::string storage;
  const std::vector<ZipMember> members = SomeMembers(storage);
  std::vector<ZipMember> twice = {members[0], members[0]};
  EXPECT_THAT(ReadZipArchive(WriteZipArchive(twice), "t.zip").status().message(),
              HasSubstr("member archive/data.pkl appears twice"));
  std::string encrypted = WriteZipArchive({members[0]});
  const size_t central = encrypted.find(std::string("PK\001\002", 4));
  encrypted[central + 8] |= 1;
  EXPECT_THAT(ReadZipArchive(encrypted, "t.zip").status().message(),
              HasSubstr("member archive/data.pkl is encrypted"));
}

}  // namespace
}  // namespace ddp
