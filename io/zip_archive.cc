// Contracts and Note [Stored ZIP archives]: io/zip_archive.h. Layouts: PKWARE's APPNOTE.TXT, sections
// 4.3.7 (local header), 4.3.12 (central directory header), 4.3.14-4.3.16 (ZIP64 end record and locator,
// end of central directory), 4.5.3 (ZIP64 extra field).
#include "io/zip_archive.h"

#include <cstdint>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/crc32.h"

namespace ddp {
namespace {

constexpr uint32_t kLocalHeader = 0x04034b50, kCentralHeader = 0x02014b50;
constexpr uint32_t kEndRecord = 0x06054b50, kZip64EndRecord = 0x06064b50, kZip64Locator = 0x07064b50;
constexpr size_t kLocalHeaderSize = 30, kCentralHeaderSize = 46, kEndRecordSize = 22;
constexpr size_t kZip64EndRecordSize = 56, kZip64LocatorSize = 20;
constexpr uint16_t kZip64ExtraId = 0x0001, kPaddingExtraId = 0x4246;  // "FB", as torch.save pads
constexpr uint32_t k32BitMarker = 0xffffffffu;
constexpr uint16_t kVersionZip64 = 45, kVersionStored = 20, kFlagUtf8Names = 1u << 11;

uint64_t LittleEndian(absl::string_view bytes, size_t at, size_t width) {
  uint64_t v = 0;
  for (size_t i = 0; i < width; ++i)
    v |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[at + i])) << (8 * i);
  return v;
}

void Append(std::string& out, uint64_t v, size_t width) {
  for (size_t i = 0; i < width; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// Where the central directory lies and how many members it lists, from the end records.
struct Directory {
  uint64_t offset = 0, size = 0, entries = 0;
  uint64_t end = 0;  // where the first end record starts: the directory must end at or before it
};

class Reader {
 public:
  Reader(absl::string_view image, const std::string& what) : image_(image), what_(what) {}

  absl::StatusOr<std::vector<ZipMember>> Read() {
    absl::StatusOr<Directory> directory = FindDirectory();
    if (!directory.ok()) return directory.status();
    if (directory->offset > directory->end || directory->size > directory->end - directory->offset ||
        directory->entries > directory->size / kCentralHeaderSize) {
      return Fail("its end record places the central directory outside the file");
    }
    std::vector<ZipMember> members;
    std::set<std::string> names;
    uint64_t at = directory->offset;
    const uint64_t directory_end = directory->offset + directory->size;
    for (uint64_t i = 0; i < directory->entries; ++i) {
      absl::StatusOr<ZipMember> member = ReadCentralHeader(at, directory_end, directory->offset);
      if (!member.ok()) return member.status();
      if (!names.insert(member->name).second)
        return Fail(absl::StrCat("member ", member->name, " appears twice"));
      members.push_back(*std::move(member));
    }
    if (at != directory_end) return Fail("its central directory has bytes after the last member");
    return members;
  }

 private:
  absl::Status Fail(absl::string_view why) const {
    return absl::InvalidArgumentError(absl::StrCat(what_, ": not a readable ZIP archive: ", why));
  }
  bool Has(uint64_t at, uint64_t n) const { return at <= image_.size() && n <= image_.size() - at; }
  uint64_t U(uint64_t at, size_t width) const { return LittleEndian(image_, at, width); }

  absl::StatusOr<Directory> FindDirectory() const {
    if (image_.size() < kEndRecordSize) return Fail("it is shorter than an end record");
    // The end record is the last 22 bytes plus a comment of at most 65535 bytes.
    const uint64_t lowest =
        image_.size() > kEndRecordSize + 0xffff ? image_.size() - kEndRecordSize - 0xffff : 0;
    uint64_t end = image_.size() - kEndRecordSize;
    while (!(U(end, 4) == kEndRecord && end + kEndRecordSize + U(end + 20, 2) == image_.size())) {
      if (end == lowest) return Fail("no end of central directory record (is it a ZIP archive?)");
      --end;
    }
    if (U(end + 4, 2) != 0 || U(end + 6, 2) != 0 || U(end + 8, 2) != U(end + 10, 2)) {
      return Fail("it spans several disks");
    }
    Directory d{U(end + 16, 4), U(end + 12, 4), U(end + 10, 2), end};
    if (end < kZip64LocatorSize || U(end - kZip64LocatorSize, 4) != kZip64Locator) {
      if (d.offset == k32BitMarker || d.size == k32BitMarker || d.entries == 0xffff) {
        return Fail("its end record needs a ZIP64 end record that is missing");
      }
      return d;
    }
    const uint64_t locator = end - kZip64LocatorSize, record = U(locator + 8, 8);
    if (U(locator + 4, 4) != 0 || U(locator + 16, 4) != 1) return Fail("it spans several disks");
    if (record > locator || locator - record < kZip64EndRecordSize || U(record, 4) != kZip64EndRecord) {
      return Fail("its ZIP64 locator points at no ZIP64 end record");
    }
    if (U(record + 16, 4) != 0 || U(record + 20, 4) != 0 || U(record + 24, 8) != U(record + 32, 8)) {
      return Fail("it spans several disks");
    }
    return Directory{U(record + 48, 8), U(record + 40, 8), U(record + 32, 8), record};
  }

  // The ZIP64 extra field's values for the 32-bit fields that hold the marker, in the order APPNOTE fixes.
  absl::Status ApplyZip64Extra(absl::string_view extra, const std::string& name, uint64_t* size,
                               uint64_t* compressed, uint64_t* offset) const {
    for (size_t at = 0; at + 4 <= extra.size();) {
      const uint64_t id = LittleEndian(extra, at, 2), length = LittleEndian(extra, at + 2, 2);
      if (length > extra.size() - at - 4)
        return Fail(absl::StrCat("member ", name, ": its extra field is cut"));
      if (id == kZip64ExtraId) {
        size_t field = at + 4;
        const size_t field_end = field + length;
        for (uint64_t* value : {size, compressed, offset}) {
          if (*value != k32BitMarker) continue;
          if (field + 8 > field_end)
            return Fail(absl::StrCat("member ", name, ": its ZIP64 extra field is short"));
          *value = LittleEndian(extra, field, 8);
          field += 8;
        }
        return absl::OkStatus();
      }
      at += 4 + length;
    }
    if (*size == k32BitMarker || *compressed == k32BitMarker || *offset == k32BitMarker) {
      return Fail(absl::StrCat("member ", name, ": a ZIP64 size or offset without its extra field"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<ZipMember> ReadCentralHeader(uint64_t& at, uint64_t directory_end, uint64_t data_end) const {
    if (directory_end - at < kCentralHeaderSize || U(at, 4) != kCentralHeader) {
      return Fail("its central directory holds something other than member headers");
    }
    const uint64_t flags = U(at + 8, 2), method = U(at + 10, 2), crc = U(at + 16, 4);
    uint64_t compressed = U(at + 20, 4), size = U(at + 24, 4), offset = U(at + 42, 4);
    const uint64_t name_length = U(at + 28, 2), extra_length = U(at + 30, 2), comment_length = U(at + 32, 2);
    const uint64_t header_end = at + kCentralHeaderSize + name_length + extra_length + comment_length;
    if (header_end > directory_end) return Fail("a member header runs past the central directory");
    ZipMember member;
    member.name = std::string(image_.substr(at + kCentralHeaderSize, name_length));
    const std::string& name = member.name;
    if (name.empty()) return Fail("a member has no name");
    DDP_RETURN_IF_ERROR(ApplyZip64Extra(image_.substr(at + kCentralHeaderSize + name_length, extra_length),
                                        name, &size, &compressed, &offset));
    at = header_end;
    if ((flags & 1) != 0) return Fail(absl::StrCat("member ", name, " is encrypted"));
    member.compression_method = static_cast<int>(method);
    if (method == 0 && compressed != size) {
      return Fail(absl::StrCat("member ", name, ": stored with two different sizes"));
    }
    if (!Has(offset, kLocalHeaderSize) || offset >= data_end || U(offset, 4) != kLocalHeader) {
      return Fail(absl::StrCat("member ", name, ": no local header where the directory says"));
    }
    const uint64_t local_name = U(offset + 26, 2), local_extra = U(offset + 28, 2);
    const uint64_t data = offset + kLocalHeaderSize + local_name + local_extra;
    if (data > data_end || compressed > data_end - data) {
      return Fail(absl::StrCat("member ", name, ": its data runs past the end of the members"));
    }
    if (image_.substr(offset + kLocalHeaderSize, local_name) != name) {
      return Fail(absl::StrCat("member ", name, ": its local header names another member"));
    }
    member.data = image_.substr(data, compressed);
    if (method == 0 && Crc32(member.data.data(), member.data.size()) != crc)
      return Fail(absl::StrCat("member ", name, ": CRC-32 mismatch (damaged)"));
    return member;
  }

  absl::string_view image_;
  const std::string& what_;
};

}  // namespace

absl::StatusOr<std::vector<ZipMember>> ReadZipArchive(absl::string_view image, const std::string& what) {
  return Reader(image, what).Read();
}

const ZipMember* FindZipMember(const std::vector<ZipMember>& members, absl::string_view name) {
  for (const ZipMember& m : members) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

namespace {

// The ZIP64 extra field holding `values`, the 64-bit forms of the fields that hold the marker.
std::string Zip64Extra(const std::vector<uint64_t>& values) {
  std::string extra;
  Append(extra, kZip64ExtraId, 2);
  Append(extra, 8 * values.size(), 2);
  for (uint64_t v : values) Append(extra, v, 8);
  return extra;
}

// A padding extra field that makes data starting `base + its length` bytes in a multiple of `alignment`.
std::string PaddingExtra(uint64_t base, size_t alignment) {
  size_t pad = static_cast<size_t>((alignment - base % alignment) % alignment);
  if (pad == 0) return "";
  if (pad < 4) pad += alignment;
  std::string extra;
  Append(extra, kPaddingExtraId, 2);
  Append(extra, pad - 4, 2);
  extra.append(pad - 4, 'Z');
  return extra;
}

uint32_t Field32(uint64_t v, bool zip64) { return zip64 ? k32BitMarker : static_cast<uint32_t>(v); }

}  // namespace

std::string WriteZipArchive(const std::vector<ZipMember>& members, const ZipWriteOptions& options) {
  std::string out, directory;
  for (const ZipMember& m : members) {
    const uint64_t offset = out.size(), size = m.data.size();
    const uint32_t crc = Crc32(m.data.data(), m.data.size());
    const bool zip64 = options.force_zip64 || size >= k32BitMarker || offset >= k32BitMarker;
    const uint16_t version = zip64 ? kVersionZip64 : kVersionStored;
    std::string local_extra = zip64 ? Zip64Extra({size, size}) : "";
    local_extra +=
        PaddingExtra(offset + kLocalHeaderSize + m.name.size() + local_extra.size(), options.alignment);
    Append(out, kLocalHeader, 4);
    Append(out, version, 2);
    Append(out, kFlagUtf8Names, 2);
    Append(out, 0, 2 + 2 + 2);  // method (stored), time, date
    Append(out, crc, 4);
    Append(out, Field32(size, zip64), 4);
    Append(out, Field32(size, zip64), 4);
    Append(out, m.name.size(), 2);
    Append(out, local_extra.size(), 2);
    out += m.name;
    out += local_extra;
    out.append(m.data.data(), m.data.size());

    const std::string central_extra = zip64 ? Zip64Extra({size, size, offset}) : "";
    Append(directory, kCentralHeader, 4);
    Append(directory, version, 2);  // made by
    Append(directory, version, 2);  // needed
    Append(directory, kFlagUtf8Names, 2);
    Append(directory, 0, 2 + 2 + 2);
    Append(directory, crc, 4);
    Append(directory, Field32(size, zip64), 4);
    Append(directory, Field32(size, zip64), 4);
    Append(directory, m.name.size(), 2);
    Append(directory, central_extra.size(), 2);
    Append(directory, 0, 2 + 2 + 2 + 4);  // comment length, disk, internal and external attributes
    Append(directory, Field32(offset, zip64), 4);
    directory += m.name;
    directory += central_extra;
  }
  const uint64_t directory_offset = out.size(), count = members.size();
  out += directory;
  const uint64_t record = out.size();
  Append(out, kZip64EndRecord, 4);
  Append(out, kZip64EndRecordSize - 12, 8);
  Append(out, kVersionZip64, 2);
  Append(out, kVersionZip64, 2);
  Append(out, 0, 4 + 4);  // this disk, the directory's disk
  Append(out, count, 8);
  Append(out, count, 8);
  Append(out, directory.size(), 8);
  Append(out, directory_offset, 8);
  Append(out, kZip64Locator, 4);
  Append(out, 0, 4);
  Append(out, record, 8);
  Append(out, 1, 4);  // disks
  Append(out, kEndRecord, 4);
  Append(out, 0, 2 + 2);
  Append(out, count >= 0xffff ? 0xffff : count, 2);
  Append(out, count >= 0xffff ? 0xffff : count, 2);
  Append(out, Field32(directory.size(), directory.size() >= k32BitMarker), 4);
  Append(out, Field32(directory_offset, directory_offset >= k32BitMarker), 4);
  Append(out, 0, 2);  // comment length
  return out;
}

}  // namespace ddp
