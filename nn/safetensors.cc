#include "nn/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "io/file.h"
#include "tensor/autograd.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes a little-endian host");

constexpr char kMetadataKey[] = "__metadata__";
// As the reference implementation: headers above 100 MB are refused.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

absl::Status Corrupt(const std::string& source, const std::string& what) {
  return absl::DataLossError(absl::StrCat("safetensors file ", source, ": ", what));
}

absl::Status BadTensor(const std::string& source, const std::string& name, const std::string& what) {
  return Corrupt(source, absl::StrCat("tensor \"", name, "\": ", what));
}

// A contiguous host copy of `t`'s bytes.
std::string TensorBytes(const Tensor& t) {
  const Tensor host = HostContiguous(t);
  return std::string(static_cast<const char*>(host.raw_data()), host.nbytes());
}

// A non-negative JSON integer, or false.
bool GetUnsigned(const nlohmann::json& j, uint64_t* out) {
  if (j.is_number_unsigned()) {
    *out = j.get<uint64_t>();
    return true;
  }
  if (j.is_number_integer() && j.get<int64_t>() >= 0) {
    *out = static_cast<uint64_t>(j.get<int64_t>());
    return true;
  }
  return false;
}

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

// Validates one header entry (everything but its position relative to other tensors).
absl::StatusOr<Entry> ParseEntry(const std::string& source, const std::string& name,
                                 const nlohmann::json& info, uint64_t data_size) {
  if (!info.is_object()) return BadTensor(source, name, "header entry is not a JSON object");
  auto dtype_it = info.find("dtype");
  auto shape_it = info.find("shape");
  auto offsets_it = info.find("data_offsets");
  if (dtype_it == info.end() || !dtype_it->is_string()) {
    return BadTensor(source, name, "missing or non-string \"dtype\"");
  }
  absl::StatusOr<DType> dtype = DTypeFromSafetensorsName(dtype_it->get<std::string>());
  if (!dtype.ok()) return BadTensor(source, name, std::string(dtype.status().message()));
  Entry entry{name, *dtype, {}, 0, 0};
  if (shape_it == info.end() || !shape_it->is_array()) return BadTensor(source, name, "missing \"shape\"");
  uint64_t bytes = ElementSize(entry.dtype);
  for (const auto& dim : *shape_it) {
    uint64_t d = 0;
    if (!GetUnsigned(dim, &d) || d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return BadTensor(source, name, "shape has a negative or non-integer dimension");
    }
    if (__builtin_mul_overflow(bytes, d, &bytes)) return BadTensor(source, name, "shape overflows");
    entry.shape.push_back(static_cast<int64_t>(d));
  }
  if (offsets_it == info.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
      !GetUnsigned((*offsets_it)[0], &entry.begin) || !GetUnsigned((*offsets_it)[1], &entry.end)) {
    return BadTensor(source, name, "\"data_offsets\" must be two non-negative integers");
  }
  if (entry.begin > entry.end || entry.end > data_size) {
    return BadTensor(source, name,
                     absl::StrCat("data_offsets [", entry.begin, ", ", entry.end,
                                  "] out of range: the data section has ", data_size, " bytes"));
  }
  if (entry.end - entry.begin != bytes) {
    return BadTensor(source, name,
                     absl::StrCat("data_offsets span ", entry.end - entry.begin, " bytes but ",
                                  DTypeName(entry.dtype), " ", ShapeToString(entry.shape), " needs ",
                                  bytes));
  }
  return entry;
}

absl::Status ParseMetadata(const std::string& source, const nlohmann::json& j, SafetensorsMetadata* out) {
  if (!j.is_object()) return Corrupt(source, "\"__metadata__\" is not a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!it.value().is_string()) {
      return Corrupt(source, absl::StrCat("metadata \"", it.key(), "\" is not a string"));
    }
    (*out)[it.key()] = it.value().get<std::string>();
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> SerializeSafetensors(const NamedTensors& tensors,
                                                 const SafetensorsMetadata& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header[kMetadataKey] = meta;
  }
  std::set<std::string> names;
  std::string data;
  for (const auto& [name, tensor] : tensors) {
    if (name.empty() || name == kMetadataKey || !names.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors: tensor name \"", name, "\" is empty, reserved or used twice"));
    }
    if (!tensor.defined()) {
      return absl::InvalidArgumentError(absl::StrCat("safetensors: tensor \"", name, "\" is undefined"));
    }
    const uint64_t begin = data.size();
    data += TensorBytes(tensor);
    header[name] = {{"dtype", SafetensorsDTypeName(tensor.dtype())},
                    {"shape", tensor.shape()},
                    {"data_offsets", {begin, static_cast<uint64_t>(data.size())}}};
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const uint64_t length = json.size();
  std::memcpy(&out[0], &length, 8);
  out += json;
  out += data;
  return out;
}

absl::StatusOr<SafetensorsContents> ParseSafetensors(absl::string_view bytes, const std::string& source,
                                                     std::shared_ptr<const void> owner) {
  if (bytes.size() < 8) {
    return Corrupt(source, absl::StrCat("too small (", bytes.size(), " bytes) to hold a header length"));
  }
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), 8);
  if (header_size > bytes.size() - 8 || header_size > kMaxHeaderBytes) {
    return Corrupt(source, absl::StrCat("header length ", header_size, " exceeds the file (", bytes.size(),
                                        " bytes)"));
  }
  const std::string header_text(bytes.substr(8, header_size));
  const nlohmann::json header = nlohmann::json::parse(header_text, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) return Corrupt(source, "the header is not valid JSON");
  if (!header.is_object()) return Corrupt(source, "the header is not a JSON object");
  const uint64_t data_size = bytes.size() - 8 - header_size;
  SafetensorsContents contents;
  std::vector<Entry> entries;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == kMetadataKey) {
      DDP_RETURN_IF_ERROR(ParseMetadata(source, it.value(), &contents.metadata));
      continue;
    }
    DDP_ASSIGN_OR_RETURN(Entry entry, ParseEntry(source, it.key(), it.value(), data_size));
    entries.push_back(std::move(entry));
  }
  // The tensors must tile the data section exactly: no overlap, no hole, nothing after the last one.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expected = 0;
  for (const Entry& e : entries) {
    if (e.begin != expected) {
      return BadTensor(source, e.name,
                       absl::StrCat("data_offsets [", e.begin, ", ", e.end, "] ",
                                    e.begin < expected ? "overlap the previous tensor" : "leave a gap",
                                    " (expected to start at ", expected, ")"));
    }
    expected = e.end;
  }
  if (expected != data_size) {
    return Corrupt(source, absl::StrCat(data_size - expected, " bytes after the last tensor"));
  }
  const char* data = bytes.data() + 8 + header_size;
  Storage shared;  // the data section, when `owner` keeps it alive
  if (owner != nullptr && data_size > 0) {
    shared =
        std::make_shared<StorageImpl>(const_cast<char*>(data), data_size, Device::CPU(), [owner](void*) {});
  }
  for (const Entry& e : entries) {
    const size_t element = ElementSize(e.dtype);
    Tensor t;
    if (shared != nullptr && reinterpret_cast<uintptr_t>(data + e.begin) % element == 0) {
      t = Tensor::View(shared, e.shape, ContiguousStrides(e.shape), static_cast<int64_t>(e.begin / element),
                       e.dtype);
    } else {
      t = Tensor::Empty(e.shape, e.dtype);
      if (e.end > e.begin) std::memcpy(t.raw_data(), data + e.begin, e.end - e.begin);
    }
    t.set_name(e.name);
    contents.tensors.emplace_back(e.name, t);
  }
  return contents;
}

absl::Status SaveSafetensors(const std::string& path, const NamedTensors& tensors,
                             const SafetensorsMetadata& metadata) {
  DDP_ASSIGN_OR_RETURN(const std::string bytes, SerializeSafetensors(tensors, metadata));
  return WriteFileAtomically(path, bytes);
}

absl::StatusOr<SafetensorsContents> ReadSafetensors(const std::string& path) {
  DDP_ASSIGN_OR_RETURN(const std::string bytes, ReadFile(path));
  return ParseSafetensors(bytes, path);
}

absl::StatusOr<NamedTensors> LoadSafetensors(const std::string& path) {
  DDP_ASSIGN_OR_RETURN(SafetensorsContents contents, ReadSafetensors(path));
  return std::move(contents.tensors);
}

absl::Status SaveModuleToSafetensors(const Module& module, const std::string& path,
                                     const SafetensorsMetadata& metadata) {
  return SaveSafetensors(path, module.StateDict(), metadata);
}

absl::Status LoadModuleFromSafetensors(Module& module, const std::string& path, bool strict) {
  DDP_ASSIGN_OR_RETURN(NamedTensors tensors, LoadSafetensors(path));
  absl::Status status = module.LoadStateDict(tensors, strict);
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat("loading ", path, ": ", status.message()));
  }
  return absl::OkStatus();
}

}  // namespace ddp
