// Contracts and Note [torch.save files read as data]: nn/torch_save.h.
#include "nn/torch_save.h"

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "base/check.h"
#include "io/file.h"
#include "io/pickle_reader.h"
#include "io/zip_archive.h"
#include "nn/torch_save_legacy.h"
#include "nn/torch_save_pickle.h"
#include "tensor/ops.h"
#include "tensor/storage.h"

namespace ddp {
namespace {

using Kind = PickleValue::Kind;

// What a torch.<Type>Storage holds, the dtype the engine keeps it as, and how its elements become that.
enum class Conversion { kNone, kRoundToFloat32, kSignExtend, kZeroExtend };
struct StorageType {
  const char* name;
  size_t element_size;
  DType dtype;
  Conversion conversion;
};

constexpr StorageType kStorageTypes[] = {
    {"FloatStorage", 4, DType::kFloat32, Conversion::kNone},
    {"HalfStorage", 2, DType::kFloat16, Conversion::kNone},
    {"BFloat16Storage", 2, DType::kBFloat16, Conversion::kNone},
    {"LongStorage", 8, DType::kInt64, Conversion::kNone},
    {"DoubleStorage", 8, DType::kFloat32, Conversion::kRoundToFloat32},
    {"IntStorage", 4, DType::kInt64, Conversion::kSignExtend},
    {"ShortStorage", 2, DType::kInt64, Conversion::kSignExtend},
    {"CharStorage", 1, DType::kInt64, Conversion::kSignExtend},
    {"ByteStorage", 1, DType::kInt64, Conversion::kZeroExtend},
    {"BoolStorage", 1, DType::kInt64, Conversion::kZeroExtend},
};

const StorageType* FindStorageType(absl::string_view global) {
  if (!absl::ConsumePrefix(&global, "torch ")) return nullptr;
  for (const StorageType& t : kStorageTypes) {
    if (global == t.name) return &t;
  }
  return nullptr;
}

size_t StorageElementSize(absl::string_view global) {
  const StorageType* type = FindStorageType(global);
  return type == nullptr ? 0 : type->element_size;
}

bool IsTensor(const PickleValue& v) {
  return v.kind == Kind::kReduced && (v.items[0]->text == "torch._utils _rebuild_tensor_v2" ||
                                      v.items[0]->text == "torch._utils _rebuild_parameter" ||
                                      v.items[0]->text == "torch._utils _rebuild_parameter_with_state");
}

bool IsStateDict(const PickleValue& v) {
  if (v.kind != Kind::kDict || v.items.empty()) return false;
  for (size_t i = 0; i + 1 < v.items.size(); i += 2) {
    if (v.items[i]->kind != Kind::kText || !IsTensor(*v.items[i + 1])) return false;
  }
  return true;
}

// What a value is, for the message that says a file holds no state_dict.
std::string Describe(const PickleValue& v) {
  switch (v.kind) {
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return "a bool";
    case Kind::kInt:
      return "an int";
    case Kind::kFloat:
      return "a float";
    case Kind::kBytes:
      return "bytes";
    case Kind::kText:
      return "a str";
    case Kind::kList:
      return absl::StrCat("a list of ", v.items.size());
    case Kind::kTuple:
      return absl::StrCat("a tuple of ", v.items.size());
    case Kind::kDict:
      return IsStateDict(v) ? absl::StrCat("a state_dict of ", v.items.size() / 2, " tensors")
                            : absl::StrCat("a dict of ", v.items.size() / 2, " entries");
    case Kind::kGlobal:
      return absl::StrCat("the global ", v.text);
    case Kind::kReduced:
      return IsTensor(v) ? "a tensor" : absl::StrCat("an object made by ", v.items[0]->text);
    case Kind::kPersistentId:
      return "a persistent id";
  }
  return "a value";
}

// The archive's pickle and storages, and the notes and counts gathered while reading it.
class ArchiveReader {
 public:
  ArchiveReader(const std::string& source, std::shared_ptr<const void> image,
                std::map<std::string, SavedStorage> storages)
      : source_(source), image_(std::move(image)), saved_(std::move(storages)) {}

  absl::StatusOr<TorchStateDict> Read(const PickleValue& root) {
    DDP_ASSIGN_OR_RETURN(const PickleValue* state_dict, FindStateDict(root));
    std::vector<std::string> names;
    for (size_t i = 0; i < state_dict->items.size(); i += 2) names.emplace_back(state_dict->items[i]->text);
    StripWrapperPrefixes(names);
    std::set<std::string> seen;
    for (size_t i = 0; i < state_dict->items.size(); i += 2) {
      const std::string& name = names[i / 2];
      if (!seen.insert(name).second) return Fail(absl::StrCat("the name \"", name, "\" appears twice"));
      DDP_ASSIGN_OR_RETURN(Tensor t, Rebuild(*state_dict->items[i + 1], name));
      result_.tensors.emplace_back(name, std::move(t));
    }
    for (const auto& [type, count] : converted_) {
      result_.notes.push_back(absl::StrCat("converted ", count, " torch.", type, " tensor(s) to ",
                                           type == "DoubleStorage" ? "float32 (rounded)" : "int64"));
    }
    return std::move(result_);
  }

 private:
  absl::Status Fail(absl::string_view why) const {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": ", why));
  }
  absl::Status FailTensor(const std::string& name, absl::string_view why) const {
    return Fail(absl::StrCat("tensor \"", name, "\": ", why));
  }

  absl::StatusOr<const PickleValue*> FindStateDict(const PickleValue& root) {
    if (IsStateDict(root)) return &root;
    if (root.kind != Kind::kDict) {
      return Fail(absl::StrCat(
          "holds ", Describe(root), ", not a state_dict",
          root.kind == Kind::kReduced ? " (a whole module? save its state_dict() instead)" : ""));
    }
    std::vector<std::string> entries;
    const PickleValue* found = nullptr;
    int candidates = 0;
    for (size_t i = 0; i + 1 < root.items.size(); i += 2) {
      const PickleValue& key = *root.items[i];
      const std::string shown = key.kind == Kind::kText ? std::string(key.text) : Describe(key);
      entries.push_back(absl::StrCat(shown, " (", Describe(*root.items[i + 1]), ")"));
      if (key.kind == Kind::kText && IsStateDict(*root.items[i + 1])) {
        found = root.items[i + 1];
        taken_from_ = shown;
        ++candidates;
      }
    }
    if (candidates == 1) {
      result_.notes.push_back(absl::StrCat("took the state_dict under the key \"", taken_from_, "\""));
      return found;
    }
    return Fail(absl::StrCat("holds a dict that is not a state_dict and has ",
                             candidates == 0 ? "none" : absl::StrCat(candidates), " among its values (",
                             absl::StrJoin(entries, ", "), "); save the one state_dict to load"));
  }

  // "module." (DDP, DataParallel) and "_orig_mod." (torch.compile) on every name are removed.
  void StripWrapperPrefixes(std::vector<std::string>& names) {
    for (bool again = true; again;) {
      again = false;
      for (const char* prefix : {"module.", "_orig_mod."}) {
        bool all = !names.empty();
        for (const std::string& n : names)
          all = all && absl::StartsWith(n, prefix) && n.size() > strlen(prefix);
        if (!all) continue;
        for (std::string& n : names) n.erase(0, strlen(prefix));
        result_.notes.push_back(absl::StrCat("removed the prefix \"", prefix, "\" from every name"));
        again = true;
      }
    }
  }

  absl::StatusOr<Tensor> Rebuild(const PickleValue& v, const std::string& name) {
    const PickleValue& args = *v.items[1];
    if (v.items[0]->text != "torch._utils _rebuild_tensor_v2") {  // a Parameter around its data
      if (args.items.empty() || !IsTensor(*args.items[0]) ||
          args.items[0]->items[0]->text != "torch._utils _rebuild_tensor_v2") {
        return FailTensor(name, "a parameter without its tensor");
      }
      return Rebuild(*args.items[0], name);
    }
    if (args.items.size() < 4 || args.items[0]->kind != Kind::kPersistentId ||
        args.items[1]->kind != Kind::kInt) {
      return FailTensor(name, "its rebuild arguments are not (storage, offset, size, stride, ...)");
    }
    DDP_ASSIGN_OR_RETURN(Shape size, Ints(*args.items[2], name, "size"));
    DDP_ASSIGN_OR_RETURN(Shape stride, Ints(*args.items[3], name, "stride"));
    if (size.size() != stride.size()) return FailTensor(name, "its size and stride differ in length");
    const PickleValue& id = *args.items[0]->items[0];
    // ("storage", type, key, location, numel), with view_metadata (None since PyTorch 0.4) in the legacy
    // format.
    const bool has_view = id.kind == Kind::kTuple && id.items.size() == 6 && id.items[5]->kind != Kind::kNone;
    if (has_view) return FailTensor(name, "its storage is a view of another (PyTorch before 0.4): not read");
    if (id.kind != Kind::kTuple || (id.items.size() != 5 && id.items.size() != 6) ||
        id.items[0]->text != "storage" || id.items[1]->kind != Kind::kGlobal ||
        id.items[2]->kind != Kind::kText || id.items[4]->kind != Kind::kInt) {
      return FailTensor(name, "its storage is not (\"storage\", type, key, location, numel)");
    }
    const StorageType* type = FindStorageType(id.items[1]->text);
    if (type == nullptr) {
      return FailTensor(name,
                        absl::StrCat("its storage type ", id.items[1]->text, " is not one the engine holds ",
                                     "(float32, float16, bfloat16, float64, integers, bool)"));
    }
    DDP_ASSIGN_OR_RETURN(const SavedStorage* storage, Storage(id, *type, name));
    const int64_t offset = args.items[1]->integer;
    DDP_RETURN_IF_ERROR(CheckView(storage->data.size() / type->element_size, offset, size, stride, name));
    if (type->conversion != Conversion::kNone) {
      ++converted_[type->name];
      return ConvertedTensor(Gather(storage->data, type->element_size, offset, size, stride), *type, size);
    }
    const char* first = storage->data.data() + static_cast<uint64_t>(offset) * type->element_size;
    if (StridesAreContiguous(size, stride) && reinterpret_cast<uintptr_t>(first) % type->element_size == 0) {
      return Tensor::View(SharedStorage(*storage), size, ContiguousStrides(size), offset, type->dtype);
    }
    Tensor t = Tensor::Empty(size, type->dtype);
    const std::string elements = Gather(storage->data, type->element_size, offset, size, stride);
    if (!elements.empty()) std::memcpy(t.raw_data(), elements.data(), elements.size());
    return t;
  }

  absl::StatusOr<Shape> Ints(const PickleValue& tuple, const std::string& name,
                             absl::string_view what) const {
    if (tuple.kind != Kind::kTuple) return FailTensor(name, absl::StrCat("its ", what, " is not a tuple"));
    Shape out;
    for (const PickleValue* v : tuple.items) {
      if (v->kind != Kind::kInt || v->integer < 0 || v->integer > (int64_t{1} << 40)) {
        return FailTensor(name, absl::StrCat("its ", what, " holds something other than a size"));
      }
      out.push_back(v->integer);
    }
    return out;
  }

  // The saved storage `id` names, checked to hold its numel elements.
  absl::StatusOr<const SavedStorage*> Storage(const PickleValue& id, const StorageType& type,
                                              const std::string& name) const {
    const auto found = saved_.find(std::string(id.items[2]->text));
    if (found == saved_.end()) {
      return FailTensor(name, absl::StrCat("its storage ", id.items[2]->text, " is not in the file"));
    }
    const SavedStorage& storage = found->second;
    if (storage.compressed)
      return FailTensor(name, absl::StrCat("its storage ", storage.name, " is compressed"));
    const int64_t numel = id.items[4]->integer;
    if (numel < 0 || static_cast<uint64_t>(numel) * type.element_size != storage.data.size()) {
      return FailTensor(
          name, absl::StrCat("its storage ", storage.name, " holds ", storage.data.size(), " bytes, not ",
                             numel, " elements of ", type.element_size, " bytes"));
    }
    return &storage;
  }

  // The engine's storage over a saved storage's bytes in the image, one per saved storage (tensors that
  // share a storage in the file share it here too); it keeps the image alive.
  ddp::Storage SharedStorage(const SavedStorage& saved) {
    ddp::Storage& shared = storages_[saved.name];
    if (shared == nullptr) {
      std::shared_ptr<const void> image = image_;
      shared = std::make_shared<StorageImpl>(const_cast<char*>(saved.data.data()), saved.data.size(),
                                             Device::CPU(), [image](void*) {});
    }
    return shared;
  }

  // OK when the view (offset, size, stride) selects only elements of a storage of `storage_numel`.
  absl::Status CheckView(uint64_t storage_numel, int64_t offset, const Shape& size, const Shape& stride,
                         const std::string& name) const {
    if (offset < 0 || static_cast<uint64_t>(offset) > storage_numel) {
      return FailTensor(name,
                        absl::StrCat("its offset ", offset, " lies outside its storage of ", storage_numel));
    }
    uint64_t numel = 1;
    for (int64_t extent : size) numel = extent == 0 ? 0 : numel;
    uint64_t last = static_cast<uint64_t>(offset);  // the last element the view reaches
    for (size_t d = 0; d < size.size() && numel > 0; ++d) {
      const auto extent = static_cast<uint64_t>(size[d]), step = static_cast<uint64_t>(stride[d]);
      if (numel > storage_numel / extent || (step > 0 && extent - 1 > storage_numel / step)) {
        return FailTensor(name,
                          "its view selects more elements than its storage holds (broadcast views are not "
                          "read)");
      }
      numel *= extent;
      last += (extent - 1) * step;
    }
    if (numel > 0 && last >= storage_numel) {
      return FailTensor(name,
                        absl::StrCat("its view reaches element ", last, " of a storage of ", storage_numel));
    }
    return absl::OkStatus();
  }

  // The elements a checked view selects, in row-major order, as contiguous bytes.
  static std::string Gather(absl::string_view storage, size_t element_size, int64_t offset, const Shape& size,
                            const Shape& stride) {
    int64_t numel = 1;
    for (int64_t extent : size) numel *= extent;
    std::string out(static_cast<size_t>(numel) * element_size, '\0');
    if (numel == 0) return out;
    std::vector<int64_t> index(size.size(), 0);
    uint64_t source = static_cast<uint64_t>(offset);
    for (int64_t i = 0; i < numel; ++i) {
      std::memcpy(&out[i * element_size], storage.data() + source * element_size, element_size);
      for (size_t d = size.size(); d-- > 0;) {  // the next row-major index
        source += static_cast<uint64_t>(stride[d]);
        if (++index[d] < size[d]) break;
        source -= static_cast<uint64_t>(stride[d]) * static_cast<uint64_t>(size[d]);
        index[d] = 0;
      }
    }
    return out;
  }

  // A float64 storage's elements rounded to float32, or an integer or bool storage's widened to int64.
  static Tensor ConvertedTensor(const std::string& elements, const StorageType& type, const Shape& size) {
    Tensor t = Tensor::Empty(size, type.dtype);
    const int64_t n = t.numel();
    if (type.conversion == Conversion::kRoundToFloat32) {
      float* out = static_cast<float*>(t.raw_data());
      for (int64_t i = 0; i < n; ++i) {
        double d;
        std::memcpy(&d, &elements[i * 8], 8);
        out[i] = static_cast<float>(d);
      }
      return t;
    }
    int64_t* out = static_cast<int64_t*>(t.raw_data());
    for (int64_t i = 0; i < n; ++i) {
      uint64_t bits = 0;
      std::memcpy(&bits, &elements[i * type.element_size], type.element_size);
      const int width = static_cast<int>(8 * type.element_size);
      if (type.conversion == Conversion::kSignExtend && width < 64 && (bits >> (width - 1)) != 0) {
        bits |= ~uint64_t{0} << width;
      }
      out[i] = static_cast<int64_t>(bits);
    }
    return t;
  }

  const std::string& source_;
  std::shared_ptr<const void> image_;             // owns what saved_ views
  std::map<std::string, SavedStorage> saved_;     // by key
  std::map<std::string, ddp::Storage> storages_;  // by member name
  std::string taken_from_;
  std::map<std::string, int> converted_;
  TorchStateDict result_;
};

// The archive's record prefix ("<name>/"): the folder of its one top-level data.pkl.
absl::StatusOr<std::string> RecordPrefix(const std::vector<ZipMember>& members, const std::string& source) {
  std::string prefix;
  bool torchscript = false;
  for (const ZipMember& m : members) {
    const size_t slash = m.name.find('/');
    if (slash == std::string::npos) continue;
    if (m.name.substr(slash + 1) == "data.pkl") prefix = m.name.substr(0, slash + 1);
    torchscript = torchscript || m.name.substr(slash + 1) == "constants.pkl";
  }
  if (!prefix.empty() && !torchscript) return prefix;
  return absl::InvalidArgumentError(absl::StrCat(
      source, torchscript
                  ? ": a TorchScript archive (torch.jit.save), not a torch.save file: save the module's "
                    "state_dict() with torch.save instead"
                  : ": a ZIP archive without a data.pkl: not a file torch.save wrote"));
}

}  // namespace

bool LooksLikeTorchSave(absl::string_view image) {
  return absl::StartsWith(image, absl::string_view("PK\003\004", 4)) ||
         absl::StartsWith(image, kTorchLegacyMagic);
}

absl::StatusOr<TorchStateDict> ParseTorchStateDict(std::string image, const std::string& source) {
  auto owner = std::make_shared<std::string>(std::move(image));  // its views may be written to
  return ParseTorchStateDict(owner, *owner, source);
}

absl::StatusOr<TorchStateDict> ParseTorchStateDict(std::shared_ptr<const void> owner, absl::string_view image,
                                                   const std::string& source) {
  if (absl::StartsWith(image, kTorchLegacyMagic)) {
    DDP_ASSIGN_OR_RETURN(LegacyTorchSave legacy, ReadLegacyTorchSave(image, source, &StorageElementSize));
    return ArchiveReader(source, std::move(owner), std::move(legacy.storages)).Read(*legacy.object.root);
  }
  DDP_ASSIGN_OR_RETURN(std::vector<ZipMember> members, ReadZipArchive(image, source));
  DDP_ASSIGN_OR_RETURN(std::string prefix, RecordPrefix(members, source));
  const ZipMember* byteorder = FindZipMember(members, prefix + "byteorder");
  if (byteorder != nullptr && byteorder->data != "little") {
    return absl::InvalidArgumentError(absl::StrCat(source, ": saved on a machine of byte order \"",
                                                   byteorder->data, "\"; only \"little\" is read"));
  }
  const ZipMember* pickle = FindZipMember(members, prefix + "data.pkl");
  if (pickle->compression_method != 0) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": its ", pickle->name, " is compressed (method ",
                                                   pickle->compression_method,
                                                   "): was the archive re-packed?"));
  }
  DDP_ASSIGN_OR_RETURN(PickleTree tree, ReadPickle(pickle->data, absl::StrCat(source, ": ", pickle->name)));
  std::map<std::string, SavedStorage> storages;  // the members <prefix>data/<key>, by key
  for (const ZipMember& m : members) {
    if (absl::StartsWith(m.name, prefix + "data/")) {
      storages[m.name.substr(prefix.size() + 5)] = SavedStorage{m.name, m.data, m.compression_method != 0};
    }
  }
  return ArchiveReader(source, std::move(owner), std::move(storages)).Read(*tree.root);
}

absl::StatusOr<TorchStateDict> ReadTorchStateDict(const std::string& path) {
  DDP_ASSIGN_OR_RETURN(std::string image, ReadFile(path));
  return ParseTorchStateDict(std::move(image), path);
}

absl::StatusOr<std::string> SerializeTorchStateDict(const NamedTensors& tensors) {
  std::set<std::string> names;
  std::vector<Tensor> hosts;  // what the storage members view: copied once, into the archive
  for (const auto& [name, tensor] : tensors) {
    if (name.empty()) return absl::InvalidArgumentError("a tensor without a name cannot be saved");
    if (!names.insert(name).second) {
      return absl::InvalidArgumentError(absl::StrCat("the name \"", name, "\" appears twice"));
    }
    hosts.push_back(HostContiguous(tensor));
  }
  const std::string pickle = TorchStateDictPickle(tensors);
  std::vector<ZipMember> members = {{"archive/data.pkl", pickle}, {"archive/byteorder", "little"}};
  for (size_t i = 0; i < hosts.size(); ++i) {
    members.push_back({absl::StrCat("archive/data/", i),
                       absl::string_view(static_cast<const char*>(hosts[i].raw_data()), hosts[i].nbytes())});
  }
  members.push_back({"archive/version", "3\n"});
  return WriteZipArchive(members);
}

absl::Status SaveTorchStateDict(const std::string& path, const NamedTensors& tensors) {
  DDP_ASSIGN_OR_RETURN(std::string image, SerializeTorchStateDict(tensors));
  return WriteFileAtomically(path, image);
}

}  // namespace ddp
