// Contracts: nn/torch_save_legacy.h. The layout is torch/serialization.py's _legacy_save.
#include "nn/torch_save_legacy.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace ddp {

const absl::string_view kTorchLegacyMagic("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.", 15);

namespace {

using Kind = PickleValue::Kind;
constexpr int64_t kLegacyProtocolVersion = 1001;

absl::Status Fail(const std::string& source, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat(source, ": not a readable torch.save file (legacy format): ", why));
}

// Each storage key the object's persistent ids name, with its element size.
absl::StatusOr<std::map<std::string, size_t>> StorageKeys(const PickleTree& object, const std::string& source,
                                                          size_t (*element_size)(absl::string_view type)) {
  std::map<std::string, size_t> sizes;
  for (const auto& value : object.values) {
    if (value->kind != Kind::kPersistentId) continue;
    const PickleValue& id = *value->items[0];
    if (id.kind != Kind::kTuple || id.items.size() < 3 || id.items[1]->kind != Kind::kGlobal ||
        id.items[2]->kind != Kind::kText) {
      return Fail(source, "a persistent id that is not (\"storage\", type, key, ...)");
    }
    const size_t size = element_size(id.items[1]->text);
    if (size == 0) continue;  // an unknown type: the tensor that uses it is refused by name later
    const auto [it, added] = sizes.emplace(std::string(id.items[2]->text), size);
    if (!added && it->second != size)
      return Fail(source, absl::StrCat("storage ", it->first, " has two types"));
  }
  return sizes;
}

}  // namespace

absl::StatusOr<LegacyTorchSave> ReadLegacyTorchSave(absl::string_view image, const std::string& source,
                                                    size_t (*element_size)(absl::string_view type)) {
  size_t at = kTorchLegacyMagic.size(), end = 0;
  // The protocol version, the saving machine, the object, the storage keys: four pickles.
  std::vector<PickleTree> pickles;
  for (const char* what : {"protocol version", "system information", "saved object", "storage keys"}) {
    absl::StatusOr<PickleTree> tree =
        ReadPickle(image.substr(at), absl::StrCat(source, ": its ", what), PickleLimits{}, &end);
    if (!tree.ok()) return tree.status();
    pickles.push_back(*std::move(tree));
    at += end;
  }
  const PickleValue& version = *pickles[0].root;
  if (version.kind != Kind::kInt || version.integer != kLegacyProtocolVersion) {
    return Fail(source, "its protocol version is not 1001");
  }
  const PickleValue* little_endian = PickleDictValue(*pickles[1].root, "little_endian");
  if (little_endian != nullptr && little_endian->kind == Kind::kBool && little_endian->integer == 0) {
    return Fail(source, "saved on a big-endian machine; only little-endian files are read");
  }
  DDP_ASSIGN_OR_RETURN(const auto sizes, StorageKeys(pickles[2], source, element_size));
  const PickleValue& keys = *pickles[3].root;
  if (keys.kind != Kind::kList) return Fail(source, "its storage keys are not a list");
  LegacyTorchSave result;
  for (const PickleValue* key : keys.items) {
    if (key->kind != Kind::kText) return Fail(source, "a storage key that is not a string");
    const auto size = sizes.find(std::string(key->text));
    if (size == sizes.end()) return Fail(source, absl::StrCat("storage ", key->text, " has no known type"));
    if (image.size() - at < 8) return Fail(source, absl::StrCat("storage ", key->text, " is cut"));
    uint64_t numel = 0;
    for (int i = 0; i < 8; ++i)
      numel |= static_cast<uint64_t>(static_cast<uint8_t>(image[at + i])) << (8 * i);
    at += 8;
    if (numel > (image.size() - at) / size->second)
      return Fail(source, absl::StrCat("storage ", key->text, " is cut"));
    const size_t bytes = static_cast<size_t>(numel) * size->second;
    result.storages[size->first] = SavedStorage{absl::StrCat("storage ", key->text), image.substr(at, bytes)};
    at += bytes;
  }
  if (at != image.size())
    return Fail(source, absl::StrCat(image.size() - at, " bytes after the last storage"));
  result.object = std::move(pickles[2]);
  return result;
}

}  // namespace ddp
