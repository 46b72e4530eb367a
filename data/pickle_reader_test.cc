// Note [Pickles read as data]: the values Python's pickle makes, read without running anything; hostile
// bytes (cuts, flipped bytes, unknown opcodes, memo references to nothing, self-reference, too many
// values) end in an error naming the opcode and its offset, never a crash or a hang.
#include "data/pickle_reader.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace ddp {
namespace {

using Kind = PickleValue::Kind;

// pickle.dumps({'a': [1, -2, 300, 70000], b'b': (None, True, 'x'), 'c': os.system}, 3) as Python 3 writes
// it: os.system becomes a global nobody calls.
const std::string kDict = std::string(
    "\200\003}q\000(X\001\000\000\000aq\001]q\002(K\001J\376\377\377\377M,\001Jp\021\001\000eC\001bq\003N"
    "\210X\001\000\000\000xq\004\207q\005X\001\000\000\000cq\006cposix\012system\012q\007u.",
    78);

TEST(PickleReaderTest, ReadsPlainValuesAndKeepsGlobalsUncalled) {
  absl::StatusOr<PickleTree> tree = ReadPickle(kDict, "k");
  ASSERT_TRUE(tree.ok()) << tree.status();
  const PickleValue* list = PickleDictValue(*tree->root, "a");
  ASSERT_NE(list, nullptr);
  ASSERT_EQ(list->kind, Kind::kList);
  ASSERT_EQ(list->items.size(), 4u);
  EXPECT_EQ(list->items[0]->integer, 1);
  EXPECT_EQ(list->items[1]->integer, -2);
  EXPECT_EQ(list->items[2]->integer, 300);
  EXPECT_EQ(list->items[3]->integer, 70000);
  const PickleValue* tuple = PickleDictValue(*tree->root, "b");
  ASSERT_NE(tuple, nullptr);
  ASSERT_EQ(tuple->kind, Kind::kTuple);
  EXPECT_EQ(tuple->items[0]->kind, Kind::kNone);
  EXPECT_EQ(tuple->items[1]->kind, Kind::kBool);
  EXPECT_EQ(tuple->items[2]->text, "x");
  const PickleValue* global = PickleDictValue(*tree->root, "c");
  ASSERT_NE(global, nullptr);
  EXPECT_EQ(global->kind, Kind::kGlobal);
  EXPECT_EQ(global->text, "posix system");
  EXPECT_EQ(PickleDictValue(*tree->root, "d"), nullptr);
}

TEST(PickleReaderTest, EveryCutIsAnErrorNamingTheOffset) {
  for (size_t cut = 0; cut < kDict.size(); ++cut) {
    absl::StatusOr<PickleTree> tree = ReadPickle(kDict.substr(0, cut), "cut");
    ASSERT_FALSE(tree.ok()) << cut;
    EXPECT_EQ(tree.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(tree.status().message().find("cut: not a readable pickle: "), std::string::npos)
        << tree.status();
  }
}

TEST(PickleReaderTest, HostileBytesEndInErrorsNotCrashes) {
  std::mt19937 random(7);
  int readable = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    std::string bytes = kDict;
    const int flips = 1 + static_cast<int>(random() % 4);
    for (int f = 0; f < flips; ++f) bytes[random() % bytes.size()] = static_cast<char>(random() % 256);
    readable += ReadPickle(bytes, "fuzz").ok() ? 1 : 0;  // either is fine; neither may crash or hang
  }
  EXPECT_LT(readable, 20000);
  // Unknown opcode, a memo entry never stored, a list that holds itself, too many values, deep marks.
  EXPECT_NE(ReadPickle(std::string("\x80\x02I1\n.", 6), "p").status().message().find("opcode 0x49 at byte 2"),
            std::string::npos);
  EXPECT_NE(ReadPickle(std::string("\x80\x02h\x05.", 5), "p").status().message().find("memo entry 5"),
            std::string::npos);
  absl::StatusOr<PickleTree> self = ReadPickle(std::string("\200\002]q\000h\000a.", 9), "p");
  ASSERT_TRUE(self.ok()) << self.status();
  EXPECT_EQ(self->root->items[0], self->root);
  PickleLimits limits;
  limits.max_values = 3;
  EXPECT_NE(ReadPickle(kDict, "p", limits).status().message().find("more values"), std::string::npos);
  EXPECT_NE(ReadPickle(std::string(100, '('), "p").status().message().find("nested deeper"),
            std::string::npos);
  EXPECT_NE(ReadPickle(std::string("\x80\x02K\x01K\x02.", 7), "p").status().message().find("unbalanced"),
            std::string::npos);
}

}  // namespace
}  // namespace ddp
