// Note [Pickles read as data]: the values Python's pickle makes, read without running anything; hostile
// bytes (cuts, flipped bytes, unknown opcodes, memo references to nothing, self-reference, too many
// values) end in an error naming the opcode and its offset, never a crash or a hang.
#include "io/pickle_reader.h"

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

// The data.pkl of torch.save(sd) in PyTorch 2.15, sd = OrderedDict(w=torch.tensor([1.5, -2.0])) with
// _metadata {'': {'version': 1}}: an OrderedDict, a tensor rebuilt from a persistent storage id.
const std::string kTorchStateDict = std::string(
    "\200\002ccollections\012OrderedDict\012q\000)Rq\001X\001\000\000\000wq\002ctorch._utils\012_rebuild_"
    "tensor_v2\012q\003((X\007\000\000\000storageq\004ctorch\012FloatStorage\012q\005X\001\000\000\0000q\006"
    "X\003\000\000\000cpuq\007K\002tq\010QK\000K\002\205q\011K\001\205q\012\211h\000)Rq\013tq\014Rq\015s}"
    "q\016X\011\000\000\000_metadataq\017h\000)Rq\020X\000\000\000\000q\021}q\022X\007\000\000\000version"
    "q\023K\001sssb.",
    220);

TEST(PickleReaderTest, ReadsTorchSavesPickleWithOrderedDictsAndPersistentIds) {
  absl::StatusOr<PickleTree> tree = ReadPickle(kTorchStateDict, "data.pkl");
  ASSERT_TRUE(tree.ok()) << tree.status();
  ASSERT_EQ(tree->root->kind, Kind::kDict);
  ASSERT_EQ(tree->root->items.size(), 2u);
  EXPECT_EQ(tree->root->items[0]->text, "w");
  const PickleValue& tensor = *tree->root->items[1];
  ASSERT_EQ(tensor.kind, Kind::kReduced);
  EXPECT_EQ(tensor.items[0]->text, "torch._utils _rebuild_tensor_v2");
  const PickleValue& args = *tensor.items[1];
  ASSERT_EQ(args.items.size(), 6u);
  ASSERT_EQ(args.items[0]->kind, Kind::kPersistentId);
  const PickleValue& id = *args.items[0]->items[0];
  ASSERT_EQ(id.items.size(), 5u);
  EXPECT_EQ(id.items[0]->text, "storage");
  EXPECT_EQ(id.items[1]->text, "torch FloatStorage");
  EXPECT_EQ(id.items[2]->text, "0");
  EXPECT_EQ(id.items[4]->integer, 2);
  EXPECT_EQ(args.items[2]->items[0]->integer, 2);  // size (2,)
  EXPECT_EQ(args.items[5]->kind, Kind::kDict);     // backward hooks: an empty OrderedDict
  ASSERT_NE(tree->root->attributes, nullptr);
  const PickleValue* metadata = PickleDictValue(*tree->root->attributes, "_metadata");
  ASSERT_NE(metadata, nullptr);
  ASSERT_NE(PickleDictValue(*metadata, ""), nullptr);
  EXPECT_EQ(PickleDictValue(*PickleDictValue(*metadata, ""), "version")->integer, 1);
}

// pickle.dumps({'lr': 0.5, 'args': argparse.Namespace(x=1)}, 2): a training checkpoint's float and an
// object made by NEWOBJ + BUILD.
TEST(PickleReaderTest, ReadsFloatsAndObjectsMadeByNewobj) {
  const std::string bytes(
      "\200\002}q\000(X\002\000\000\000lrq\001G\077\340\000\000\000\000\000\000X\004\000\000\000argsq\002"
      "cargparse\012Namespace\012q\003)\201q\004}q\005X\001\000\000\000xq\006K\001sbu.",
      78);
  absl::StatusOr<PickleTree> tree = ReadPickle(bytes, "p");
  ASSERT_TRUE(tree.ok()) << tree.status();
  const PickleValue* lr = PickleDictValue(*tree->root, "lr");
  ASSERT_NE(lr, nullptr);
  EXPECT_EQ(lr->kind, Kind::kFloat);
  EXPECT_EQ(lr->real, 0.5);
  const PickleValue* args = PickleDictValue(*tree->root, "args");
  ASSERT_NE(args, nullptr);
  ASSERT_EQ(args->kind, Kind::kReduced);
  EXPECT_EQ(args->items[0]->text, "argparse Namespace");
  ASSERT_EQ(args->items.size(), 3u);
  EXPECT_EQ(PickleDictValue(*args->items[2], "x")->integer, 1);
}

TEST(PickleReaderTest, EveryCutIsAnErrorNamingTheOffset) {
  for (const std::string& whole : {kDict, kTorchStateDict}) {
    for (size_t cut = 0; cut < whole.size(); ++cut) {
      absl::StatusOr<PickleTree> tree = ReadPickle(whole.substr(0, cut), "cut");
      ASSERT_FALSE(tree.ok()) << cut;
      EXPECT_EQ(tree.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_NE(tree.status().message().find("cut: not a readable pickle: "), std::string::npos)
          << tree.status();
    }
  }
}

TEST(PickleReaderTest, HostileBytesEndInErrorsNotCrashes) {
  std::mt19937 random(7);
  int readable = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    std::string bytes = trial % 2 == 0 ? kDict : kTorchStateDict;
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
