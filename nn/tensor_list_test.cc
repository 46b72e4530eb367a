#include "nn/tensor_list.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensor/factory.h"

namespace ddp {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(TensorListTest, PositionalAndNamedEntriesKeepTheirOrder) {
  const Tensor a = Zeros({2, 3}), b = Ones({4});
  TensorList positional{a, b};
  ASSERT_EQ(positional.size(), 2u);
  EXPECT_TRUE(positional[0].is_same(a));
  EXPECT_TRUE(positional[1].is_same(b));
  EXPECT_EQ(positional.name(1), "");
  EXPECT_FALSE(positional.Has(""));
  EXPECT_EQ(positional.ToString(), "([2, 3] float32, [4] float32)");

  TensorList named{{"logits", a}, {"aux", Tensor()}};
  EXPECT_TRUE(named.Has("aux"));
  EXPECT_FALSE(named.Has("logit"));
  EXPECT_TRUE(named.Get("logits").is_same(a));
  EXPECT_FALSE(named.Get("aux").defined());  // an optional output not computed: PyTorch's None
  EXPECT_EQ(named.ToString(), "(logits: [2, 3] float32, aux: undefined)");

  TensorList built;
  built.Add(a).Add("side", b);
  EXPECT_EQ(built.ToString(), "([2, 3] float32, side: [4] float32)");
  built[0] = b;  // observers replace entries by aliases
  EXPECT_TRUE(built[0].is_same(b));
  EXPECT_EQ(TensorList(std::vector<Tensor>{a, b, a}).tensors().size(), 3u);
}

TEST(TensorListTest, MisuseAbortsNamingTheEntry) {
  TensorList list{{"logits", Zeros({1})}};
  EXPECT_DEATH(list.Add("logits", Ones({1})), "two entries called \"logits\" in \\(logits: \\[1\\] float32\\)");
  EXPECT_DEATH(list.Add("", Ones({1})), "needs a non-empty name");
  EXPECT_DEATH(list.Get("aux"), "no entry called \"aux\" in \\(logits: \\[1\\] float32\\)");
  EXPECT_DEATH(list[1], "no entry 1 in");
}

// Python's binding of forward(self, image, side): positions first, then names, each parameter once.
TEST(TensorListTest, BindFollowsPythonArgumentBinding) {
  const Tensor x = Zeros({2}), s = Ones({3});
  const std::vector<std::string> params = {"image", "side"};
  for (const TensorList& call :
       {TensorList{x, s}, TensorList{{"image", x}, {"side", s}}, TensorList{{"side", s}, {"image", x}},
        TensorList().Add(x).Add("side", s)}) {
    absl::StatusOr<std::vector<Tensor>> bound = call.Bind(params);
    ASSERT_TRUE(bound.ok()) << bound.status();
    ASSERT_EQ(bound->size(), 2u);
    EXPECT_TRUE((*bound)[0].is_same(x)) << call.ToString();
    EXPECT_TRUE((*bound)[1].is_same(s)) << call.ToString();
  }
  auto error = [&](const TensorList& call) { return std::string(call.Bind(params).status().message()); };
  EXPECT_EQ(error(TensorList{x}), "takes (image, side): \"side\" is missing; got ([2] float32)");
  EXPECT_EQ(error(TensorList{x, s, x}),
            "takes (image, side): 3 positional inputs for 2 parameters; got ([2] float32, [3] float32, [2] float32)");
  EXPECT_THAT(error(TensorList{{"image", x}, {"sides", s}}), HasSubstr("no parameter is called \"sides\""));
  EXPECT_THAT(error(TensorList().Add(x).Add("image", s)), HasSubstr("\"image\" is given by position and by name"));
  EXPECT_THAT(error(TensorList().Add("image", x).Add(s)), HasSubstr("\"image\" is given by position and by name"));
  EXPECT_THAT(*TensorList{}.Bind({}), ElementsAre());
}

}  // namespace
}  // namespace ddp
