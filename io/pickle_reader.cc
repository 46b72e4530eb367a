// Contracts and Note [Pickles read as data]: io/pickle_reader.h.
#include "io/pickle_reader.h"

#include <cstring>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ddp {
namespace {

using Value = PickleValue*;
using Kind = PickleValue::Kind;

// The machine's state: the input, the stack (with marks as null entries), the memo.
class Machine {
 public:
  Machine(absl::string_view bytes, const std::string& what, const PickleLimits& limits)
      : in_(bytes), what_(what), limits_(limits) {}

  // The offset of the next opcode (after Run: just past STOP).
  size_t position() const { return pos_; }

  absl::StatusOr<PickleTree> Run() {
    while (pos_ < in_.size()) {
      op_at_ = pos_;
      op_ = static_cast<uint8_t>(in_[pos_++]);
      if (op_ == '.') {
        if (stack_.size() != 1 || stack_[0] == nullptr) return Fail("STOP with an unbalanced stack");
        tree_.root = stack_[0];
        return std::move(tree_);
      }
      if (absl::Status s = Step(); !s.ok()) return s;
    }
    return Fail("no STOP before the end of the data");
  }

 private:
  absl::Status Fail(absl::string_view why) const {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: not a readable pickle: %s (opcode 0x%02x at byte %d)", what_, why, op_, op_at_));
  }

  // `n` bytes of argument, or false when they run past the end.
  bool Take(size_t n, absl::string_view* out) {
    if (n > in_.size() - pos_) return false;
    *out = in_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  bool TakeUnsigned(size_t n, uint64_t* v) {
    absl::string_view raw;
    if (!Take(n, &raw)) return false;
    *v = 0;
    for (size_t i = 0; i < n; ++i) *v |= static_cast<uint64_t>(static_cast<uint8_t>(raw[i])) << (8 * i);
    return true;
  }

  absl::StatusOr<Value> New(Kind kind) {
    if (static_cast<int64_t>(tree_.values.size()) >= limits_.max_values) {
      return Fail("more values than the reader allows");
    }
    tree_.values.push_back(std::make_unique<PickleValue>());
    tree_.values.back()->kind = kind;
    return tree_.values.back().get();
  }
  absl::Status Push(absl::StatusOr<Value> v) {
    if (!v.ok()) return v.status();
    stack_.push_back(*std::move(v));
    return absl::OkStatus();
  }
  absl::StatusOr<Value> Pop() {
    if (stack_.empty() || stack_.back() == nullptr) return Fail("a value was wanted and the stack has none");
    Value v = stack_.back();
    stack_.pop_back();
    return v;
  }
  // The top `n` values, in stack order (the topmost last).
  absl::StatusOr<std::vector<Value>> PopLast(size_t n) {
    std::vector<Value> items(n);
    for (size_t i = n; i-- > 0;) {
      absl::StatusOr<Value> v = Pop();
      if (!v.ok()) return v.status();
      items[i] = *v;
    }
    return items;
  }
  // The values above the topmost mark, which is removed with them.
  absl::StatusOr<std::vector<Value>> PopToMark() {
    size_t mark = stack_.size();
    while (mark > 0 && stack_[mark - 1] != nullptr) --mark;
    if (mark == 0) return Fail("no mark on the stack");
    std::vector<Value> items(stack_.begin() + mark, stack_.end());
    stack_.resize(mark - 1);
    --depth_;
    return items;
  }

  absl::Status PushString(Kind kind, size_t length_bytes) {
    uint64_t n = 0;
    absl::string_view s;
    if (!TakeUnsigned(length_bytes, &n) || n > in_.size() || !Take(static_cast<size_t>(n), &s)) {
      return Fail("a string runs past the end");
    }
    absl::StatusOr<Value> v = New(kind);
    if (!v.ok()) return v.status();
    (*v)->text = s;
    return Push(std::move(v));
  }
  absl::Status PushInt(int64_t value) {
    absl::StatusOr<Value> v = New(Kind::kInt);
    if (!v.ok()) return v.status();
    (*v)->integer = value;
    return Push(std::move(v));
  }
  absl::Status Memo(uint64_t index) {
    if (stack_.empty() || stack_.back() == nullptr) return Fail("nothing to memoize");
    if (memo_.size() >= static_cast<size_t>(limits_.max_values)) return Fail("too many memo entries");
    memo_[index] = stack_.back();
    return absl::OkStatus();
  }
  absl::Status Recall(uint64_t index) {
    const auto it = memo_.find(index);
    if (it == memo_.end()) return Fail(absl::StrCat("memo entry ", index, " was never stored"));
    stack_.push_back(it->second);
    return absl::OkStatus();
  }
  absl::Status Global(std::string module, std::string name) {
    absl::StatusOr<Value> v = New(Kind::kGlobal);
    if (!v.ok()) return v.status();
    (*v)->owned = absl::StrCat(module, " ", name);
    (*v)->text = (*v)->owned;
    return Push(std::move(v));
  }
  absl::Status MakeTuple(std::vector<Value> items) {
    absl::StatusOr<Value> v = New(Kind::kTuple);
    if (!v.ok()) return v.status();
    (*v)->items.assign(items.begin(), items.end());
    return Push(std::move(v));
  }
  // Appends `items` to the list, or sets them as key/value pairs in the dict, under them on the stack.
  absl::Status AddTo(Kind kind, std::vector<Value> items) {
    if (stack_.empty() || stack_.back() == nullptr || stack_.back()->kind != kind) {
      return Fail(kind == Kind::kList ? "APPEND(S) without a list" : "SETITEM(S) without a dict");
    }
    if (kind == Kind::kDict && items.size() % 2 != 0) return Fail("SETITEMS with a key and no value");
    auto& target = stack_.back()->items;
    target.insert(target.end(), items.begin(), items.end());
    return absl::OkStatus();
  }

  // _codecs.encode(text, "latin1"): how Python 3 pickles bytes at protocol 2, pushed as the bytes it makes
  // (each code point of the UTF-8 text one byte; above U+00FF it is refused).
  absl::Status PushLatin1Bytes(const PickleValue& args) {
    if (args.items.size() != 2 || args.items[0]->kind != Kind::kText || args.items[1]->kind != Kind::kText ||
        args.items[1]->text != "latin1") {
      return Fail("_codecs.encode with arguments other than (text, 'latin1')");
    }
    absl::StatusOr<Value> v = New(Kind::kBytes);
    if (!v.ok()) return v.status();
    const absl::string_view utf8 = args.items[0]->text;
    std::string& out = (*v)->owned;
    out.reserve(utf8.size());
    for (size_t i = 0; i < utf8.size(); ++i) {
      const auto c = static_cast<uint8_t>(utf8[i]);
      if (c < 0x80) {
        out.push_back(static_cast<char>(c));
        continue;
      }
      const auto next = i + 1 < utf8.size() ? static_cast<uint8_t>(utf8[i + 1]) : 0;
      if ((c != 0xc2 && c != 0xc3) || (next & 0xc0) != 0x80)
        return Fail("latin-1 text that is not in U+0000..U+00FF");
      out.push_back(static_cast<char>(((c & 0x03) << 6) | (next & 0x3f)));
      ++i;
    }
    (*v)->text = out;
    return Push(std::move(v));
  }

  absl::Status PushReduced(Value callable, Value args) {
    absl::StatusOr<Value> v = New(Kind::kReduced);
    if (!v.ok()) return v.status();
    (*v)->items = {callable, args};
    return Push(std::move(v));
  }
  // BUILD: the state goes with a freshly reduced object, or becomes the attributes of an OrderedDict.
  absl::Status Build() {
    absl::StatusOr<Value> state = Pop();
    if (!state.ok()) return state.status();
    const Value target = stack_.empty() ? nullptr : stack_.back();
    if (target != nullptr && target->kind == Kind::kReduced && target->items.size() == 2) {
      target->items.push_back(*state);
      return absl::OkStatus();
    }
    if (target != nullptr && target->kind == Kind::kDict && target->attributes == nullptr) {
      target->attributes = *state;
      return absl::OkStatus();
    }
    return Fail("BUILD on something other than a freshly reduced object");
  }

  absl::Status Step();

  absl::string_view in_;
  const std::string& what_;
  const PickleLimits& limits_;
  size_t pos_ = 0, op_at_ = 0;
  uint8_t op_ = 0;
  int64_t depth_ = 0;
  PickleTree tree_;
  std::vector<Value> stack_;
  std::unordered_map<uint64_t, Value> memo_;
};

absl::Status Machine::Step() {
  uint64_t n = 0;
  switch (op_) {
    case 0x80:  // PROTO
      if (!TakeUnsigned(1, &n) || n > 5) return Fail("an unknown protocol");
      return absl::OkStatus();
    case 0x95:  // FRAME: its bytes follow in line
      if (!TakeUnsigned(8, &n)) return Fail("a frame runs past the end");
      return absl::OkStatus();
    case '(':  // MARK
      if (++depth_ > limits_.max_depth) return Fail("marks nested deeper than the reader allows");
      stack_.push_back(nullptr);
      return absl::OkStatus();
    case '}':
      return Push(New(Kind::kDict));
    case ']':
      return Push(New(Kind::kList));
    case ')':
      return MakeTuple({});
    case 't': {
      absl::StatusOr<std::vector<Value>> items = PopToMark();
      if (!items.ok()) return items.status();
      return MakeTuple(*std::move(items));
    }
    case 0x85:
    case 0x86:
    case 0x87: {  // TUPLE1..3
      absl::StatusOr<std::vector<Value>> items = PopLast(op_ - 0x84);
      if (!items.ok()) return items.status();
      return MakeTuple(*std::move(items));
    }
    case 'a':
    case 's': {  // APPEND, SETITEM
      absl::StatusOr<std::vector<Value>> items = PopLast(op_ == 'a' ? 1 : 2);
      if (!items.ok()) return items.status();
      return AddTo(op_ == 'a' ? Kind::kList : Kind::kDict, *std::move(items));
    }
    case 'e':
    case 'u': {  // APPENDS, SETITEMS
      absl::StatusOr<std::vector<Value>> items = PopToMark();
      if (!items.ok()) return items.status();
      return AddTo(op_ == 'e' ? Kind::kList : Kind::kDict, *std::move(items));
    }
    case 'J':  // BININT: 4 bytes, signed
      if (!TakeUnsigned(4, &n)) return Fail("an integer runs past the end");
      return PushInt(static_cast<int32_t>(static_cast<uint32_t>(n)));
    case 'K':
    case 'M':  // BININT1, BININT2: unsigned
      if (!TakeUnsigned(op_ == 'K' ? 1 : 2, &n)) return Fail("an integer runs past the end");
      return PushInt(static_cast<int64_t>(n));
    case 0x8a: {  // LONG1: a little-endian two's complement of up to 8 bytes here
      if (!TakeUnsigned(1, &n) || n > 8) return Fail("a long integer wider than 8 bytes");
      const size_t width = static_cast<size_t>(n);
      if (!TakeUnsigned(width, &n)) return Fail("an integer runs past the end");
      if (width > 0 && width < 8 && (n >> (8 * width - 1)) != 0) n |= ~uint64_t{0} << (8 * width);
      return PushInt(static_cast<int64_t>(n));
    }
    case 'N':
      return Push(New(Kind::kNone));
    case 0x88:
    case 0x89: {  // NEWTRUE, NEWFALSE
      absl::StatusOr<Value> v = New(Kind::kBool);
      if (!v.ok()) return v.status();
      (*v)->integer = op_ == 0x88 ? 1 : 0;
      return Push(std::move(v));
    }
    case 'U':  // SHORT_BINSTRING (Python 2 str: bytes)
    case 'C':  // SHORT_BINBYTES
      return PushString(Kind::kBytes, 1);
    case 'T':  // BINSTRING
    case 'B':  // BINBYTES
      return PushString(Kind::kBytes, 4);
    case 0x8e:  // BINBYTES8
    case 0x96:  // BYTEARRAY8
      return PushString(Kind::kBytes, 8);
    case 0x8c:  // SHORT_BINUNICODE
      return PushString(Kind::kText, 1);
    case 'X':  // BINUNICODE
      return PushString(Kind::kText, 4);
    case 0x8d:  // BINUNICODE8
      return PushString(Kind::kText, 8);
    case 'q':  // BINPUT
      if (!TakeUnsigned(1, &n)) return Fail("a memo index runs past the end");
      return Memo(n);
    case 'r':  // LONG_BINPUT
      if (!TakeUnsigned(4, &n)) return Fail("a memo index runs past the end");
      return Memo(n);
    case 0x94:  // MEMOIZE
      return Memo(memo_.size());
    case 'h':  // BINGET
      if (!TakeUnsigned(1, &n)) return Fail("a memo index runs past the end");
      return Recall(n);
    case 'j':  // LONG_BINGET
      if (!TakeUnsigned(4, &n)) return Fail("a memo index runs past the end");
      return Recall(n);
    case 'c': {  // GLOBAL: "module\nname\n"
      const size_t module_end = in_.find('\n', pos_);
      const size_t name_end =
          module_end == absl::string_view::npos ? module_end : in_.find('\n', module_end + 1);
      if (name_end == absl::string_view::npos) return Fail("a global's name runs past the end");
      std::string module(in_.substr(pos_, module_end - pos_)),
          name(in_.substr(module_end + 1, name_end - module_end - 1));
      pos_ = name_end + 1;
      return Global(std::move(module), std::move(name));
    }
    case 0x93: {                                              // STACK_GLOBAL
      absl::StatusOr<std::vector<Value>> parts = PopLast(2);  // module, name
      if (!parts.ok()) return parts.status();
      const Value module = (*parts)[0], name = (*parts)[1];
      if (module->kind != Kind::kText || name->kind != Kind::kText) return Fail("a global named by non-text");
      return Global(std::string(module->text), std::string(name->text));
    }
    case 'R': {                                               // REDUCE: kept, not called
      absl::StatusOr<std::vector<Value>> parts = PopLast(2);  // callable, args
      if (!parts.ok()) return parts.status();
      const Value callable = (*parts)[0], args = (*parts)[1];
      if (callable->kind != Kind::kGlobal || args->kind != Kind::kTuple) {
        return Fail("REDUCE of something other than a global and a tuple");
      }
      if (callable->text == "_codecs encode") return PushLatin1Bytes(*args);
      if (callable->text == "collections OrderedDict" && args->items.empty()) return Push(New(Kind::kDict));
      return PushReduced(callable, args);
    }
    case 0x81: {  // NEWOBJ: cls.__new__(cls, *args), kept like REDUCE
      absl::StatusOr<std::vector<Value>> parts = PopLast(2);  // class, args
      if (!parts.ok()) return parts.status();
      if ((*parts)[0]->kind != Kind::kGlobal || (*parts)[1]->kind != Kind::kTuple) {
        return Fail("NEWOBJ of something other than a global and a tuple");
      }
      return PushReduced((*parts)[0], (*parts)[1]);
    }
    case 'b':  // BUILD: the state is kept with the object
      return Build();
    case 'Q': {  // BINPERSID
      absl::StatusOr<Value> id = Pop();
      if (!id.ok()) return id.status();
      absl::StatusOr<Value> v = New(Kind::kPersistentId);
      if (!v.ok()) return v.status();
      (*v)->items = {*id};
      return Push(std::move(v));
    }
    case 'G': {  // BINFLOAT: 8 bytes, big-endian IEEE 754
      absl::string_view raw;
      if (!Take(8, &raw)) return Fail("a float runs past the end");
      uint64_t bits = 0;
      for (char c : raw) bits = (bits << 8) | static_cast<uint8_t>(c);
      absl::StatusOr<Value> v = New(Kind::kFloat);
      if (!v.ok()) return v.status();
      std::memcpy(&(*v)->real, &bits, sizeof(bits));
      return Push(std::move(v));
    }
    default:
      return Fail("an opcode this reader does not take");
  }
}

}  // namespace

absl::StatusOr<PickleTree> ReadPickle(absl::string_view bytes, const std::string& what,
                                      const PickleLimits& limits, size_t* end) {
  Machine machine(bytes, what, limits);
  absl::StatusOr<PickleTree> tree = machine.Run();
  if (end != nullptr) *end = machine.position();
  return tree;
}

const PickleValue* PickleDictValue(const PickleValue& dict, absl::string_view key) {
  if (dict.kind != PickleValue::Kind::kDict) return nullptr;
  for (size_t i = 0; i + 1 < dict.items.size(); i += 2) {
    const PickleValue& k = *dict.items[i];
    if ((k.kind == PickleValue::Kind::kBytes || k.kind == PickleValue::Kind::kText) && k.text == key) {
      return dict.items[i + 1];
    }
  }
  return nullptr;
}

}  // namespace ddp
