// Contracts: data/cifar_pickle.h.
#include "data/cifar_pickle.h"

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "io/pickle_reader.h"

namespace ddp {
namespace {

using Kind = PickleValue::Kind;
constexpr int64_t kImageBytes = 3 * 32 * 32;

bool IsGlobal(const PickleValue* v, std::initializer_list<absl::string_view> names) {
  if (v == nullptr || v->kind != Kind::kGlobal) return false;
  for (absl::string_view name : names) {
    if (v->text == name) return true;
  }
  return false;
}

bool IsString(const PickleValue* v, absl::string_view s) {
  return v != nullptr && (v->kind == Kind::kBytes || v->kind == Kind::kText) && v->text == s;
}

// A reduced object's callable, arguments and state (null where it has none).
struct Reduced {
  const PickleValue* callable = nullptr;
  const PickleValue* args = nullptr;
  const PickleValue* state = nullptr;
};
Reduced PartsOf(const PickleValue* v) {
  if (v == nullptr || v->kind != Kind::kReduced) return {};
  return {v->items[0], v->items[1], v->items.size() > 2 ? v->items[2] : nullptr};
}

// The parts of a pickled numpy array, whichever of numpy's two forms holds them.
struct ArrayParts {
  const PickleValue* shape = nullptr;  // a tuple of ints
  const PickleValue* dtype = nullptr;  // a reduced numpy.dtype
  bool c_order = false;
  const PickleValue* raw = nullptr;  // the bytes
};

// _reconstruct(ndarray, (0,), b"b") with the state (version, shape, dtype, fortran, raw), or (protocol 5)
// _frombuffer(raw, dtype, shape, order).
bool PartsOfArray(const PickleValue* v, ArrayParts* parts) {
  const Reduced r = PartsOf(v);
  if (IsGlobal(r.callable, {"numpy.core.multiarray _reconstruct", "numpy._core.multiarray _reconstruct"})) {
    if (r.state == nullptr || r.state->kind != Kind::kTuple || r.state->items.size() != 5) return false;
    const PickleValue* fortran = r.state->items[3];
    *parts = {r.state->items[1], r.state->items[2], fortran->kind == Kind::kBool && fortran->integer == 0,
              r.state->items[4]};
    return true;
  }
  if (IsGlobal(r.callable, {"numpy.core.numeric _frombuffer", "numpy._core.numeric _frombuffer"})) {
    if (r.args->items.size() != 4) return false;
    *parts = {r.args->items[2], r.args->items[1], IsString(r.args->items[3], "C"), r.args->items[0]};
    return true;
  }
  return false;
}

// The raw bytes of `v` when it is numpy's pickled form of a C-order uint8 array [rows, 3072].
absl::Status ImageArray(const PickleValue* v, const std::string& path, absl::string_view* raw,
                        int64_t* rows) {
  const auto refuse = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": \"data\" is not a numpy uint8 array of 3072-byte images (", why, ")"));
  };
  ArrayParts parts;
  if (!PartsOfArray(v, &parts)) return refuse("not one of numpy's pickled forms of an array");
  const PickleValue* shape = parts.shape;
  if (shape->kind != Kind::kTuple || shape->items.size() != 2 || shape->items[0]->kind != Kind::kInt ||
      shape->items[1]->kind != Kind::kInt || shape->items[1]->integer != kImageBytes ||
      shape->items[0]->integer < 0) {
    return refuse("shape is not [n, 3072]");
  }
  const Reduced dtype = PartsOf(parts.dtype);
  if (!IsGlobal(dtype.callable, {"numpy dtype"}) || dtype.args->items.empty() ||
      !IsString(dtype.args->items[0], "u1")) {
    return refuse("element type is not uint8");
  }
  if (!parts.c_order) return refuse("not in C order");
  if (parts.raw->kind != Kind::kBytes) return refuse("its bytes are not a byte string");
  *raw = parts.raw->text;
  *rows = shape->items[0]->integer;
  if (static_cast<int64_t>(raw->size()) != *rows * kImageBytes) {
    return refuse(absl::StrCat(raw->size(), " bytes for ", *rows, " images"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status AppendPickledCifarBatch(absl::string_view bytes, const std::string& path,
                                     absl::string_view label_key, int64_t num_classes,
                                     std::vector<uint8_t>& pixels, std::vector<int64_t>& labels) {
  absl::StatusOr<PickleTree> tree = ReadPickle(bytes, path);
  if (!tree.ok()) return tree.status();
  if (tree->root->kind != Kind::kDict) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a CIFAR batch (the pickle holds no dict)"));
  }
  absl::string_view raw;
  int64_t rows = 0;
  DDP_RETURN_IF_ERROR(ImageArray(PickleDictValue(*tree->root, "data"), path, &raw, &rows));
  const PickleValue* list = PickleDictValue(*tree->root, label_key);
  if (list == nullptr || list->kind != Kind::kList || static_cast<int64_t>(list->items.size()) != rows) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": \"", label_key, "\" is not a list of ", rows, " labels, one per image"));
  }
  std::vector<int64_t> batch_labels;
  batch_labels.reserve(list->items.size());
  for (const PickleValue* label : list->items) {
    if (label->kind != Kind::kInt || label->integer < 0 || label->integer >= num_classes) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": label ", batch_labels.size(), " is not in 0..", num_classes - 1));
    }
    batch_labels.push_back(label->integer);
  }
  pixels.insert(pixels.end(), raw.begin(), raw.end());
  labels.insert(labels.end(), batch_labels.begin(), batch_labels.end());
  return absl::OkStatus();
}

}  // namespace ddp
