// Note [torch.save files read as data]: files PyTorch 1.13 and 2.x wrote (tools/gen_torch_save_fixtures.py)
// read to the values they hold, views, dtypes and parameters included; a PyTorch model's weights give the
// logits PyTorch computed; the files we write are read back and, where PyTorch is installed, loaded by
// torch.load(weights_only=True) into the reference model, which computes our logits; what the reader
// refuses (whole modules, two state_dicts, TorchScript, the legacy format, damaged archives) is named.
#include "nn/torch_save.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "io/file.h"
#include "io/zip_archive.h"
#include "nn/models.h"
#include "nn/safetensors.h"
#include "nn/weights_file.h"
#include "tensor/ops.h"
#include "testing/process.h"

namespace ddp {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Fixture(const std::string& file) { return Runfile("tests/fixtures/" + file); }

const Tensor& Find(const NamedTensors& tensors, const std::string& name) {
  for (const auto& [n, t] : tensors) {
    if (n == name) return t;
  }
  static const Tensor kNone;
  ADD_FAILURE() << "no tensor " << name;
  return kNone;
}

std::vector<double> Values(const Tensor& t) {
  const Tensor f = t.dtype() == DType::kInt64 ? t : ToDType(t, DType::kFloat32);
  std::vector<double> out;
  for (int64_t i = 0; i < f.numel(); ++i) {
    out.push_back(f.dtype() == DType::kInt64
                      ? static_cast<double>(static_cast<const int64_t*>(f.raw_data())[i])
                      : static_cast<const float*>(f.raw_data())[i]);
  }
  return out;
}

TEST(TorchSaveTest, ReadsViewsDtypesAndParametersAsPyTorchWroteThem) {
  for (const char* version : {"1.13", "2.15", "2.15_protocol5", "1.13_legacy", "2.15_legacy"}) {
    SCOPED_TRACE(version);
    absl::StatusOr<TorchStateDict> read =
        ReadTorchStateDict(Fixture(absl::StrCat("torch_save_views_", version, ".pt")));
    ASSERT_TRUE(read.ok()) << read.status();
    const NamedTensors& t = read->tensors;
    ASSERT_EQ(t.size(), 15u);
    EXPECT_EQ(t[0].first, "f32");
    EXPECT_EQ(t[14].first, "parameter");
    EXPECT_THAT(Values(Find(t, "f32")), ElementsAre(0, 0.5, 1, 1.5, 2, 2.5));
    EXPECT_EQ(Find(t, "transposed").shape(), (Shape{4, 3}));
    EXPECT_THAT(Values(Find(t, "transposed")), ElementsAre(0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11));
    EXPECT_THAT(Values(Find(t, "rows_1_2")), ElementsAre(4, 5, 6, 7, 8, 9, 10, 11));
    EXPECT_THAT(Values(Find(t, "column_2")), ElementsAre(2, 6, 10));
    EXPECT_EQ(Find(t, "f64").dtype(), DType::kFloat32);
    EXPECT_THAT(Values(Find(t, "f64")), ElementsAre(0, 0.25, 0.5, 0.75));
    EXPECT_EQ(Find(t, "f16").dtype(), DType::kFloat16);
    EXPECT_THAT(Values(Find(t, "f16")), ElementsAre(1.5, -2.25, 65504));
    EXPECT_EQ(Find(t, "bf16").dtype(), DType::kBFloat16);
    EXPECT_THAT(Values(Find(t, "bf16")), ElementsAre(1, -3, 0.5, 256));
    EXPECT_EQ(Find(t, "i32").dtype(), DType::kInt64);
    EXPECT_THAT(Values(Find(t, "i32")), ElementsAre(-5, 7, 2147483647));
    EXPECT_THAT(Values(Find(t, "i64")), ElementsAre(-1099511627776.0, 3));
    EXPECT_THAT(Values(Find(t, "i8")), ElementsAre(-128, 127));
    EXPECT_THAT(Values(Find(t, "u8")), ElementsAre(255, 0));
    EXPECT_THAT(Values(Find(t, "bool")), ElementsAre(1, 0, 1));
    EXPECT_EQ(Find(t, "scalar").shape(), Shape{});
    EXPECT_THAT(Values(Find(t, "scalar")), ElementsAre(3.25));
    EXPECT_EQ(Find(t, "empty").shape(), (Shape{0, 3}));
    EXPECT_THAT(Values(Find(t, "parameter")), ElementsAre(2, 4));
    EXPECT_THAT(read->notes, ElementsAre("converted 1 torch.BoolStorage tensor(s) to int64",
                                         "converted 1 torch.ByteStorage tensor(s) to int64",
                                         "converted 1 torch.CharStorage tensor(s) to int64",
                                         "converted 1 torch.DoubleStorage tensor(s) to float32 (rounded)",
                                         "converted 1 torch.IntStorage tensor(s) to int64"));
  }
}

// The reference cnn_bn (tools/reference_models.py) trained three steps in PyTorch 2.x: its weights and
// BatchNorm statistics loaded here give its eval-mode logits.
TEST(TorchSaveTest, PyTorchsCnnBnWeightsGiveItsLogitsHere) {
  Generator generator(1);
  absl::StatusOr<std::shared_ptr<Module>> model = MakeModel("cnn_bn", generator, ModelInput{{1, 4, 4}, 10});
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<std::vector<std::string>> notes =
      LoadModuleWeights(**model, Fixture("torch_save_cnn_bn.pt"));
  ASSERT_TRUE(notes.ok()) << notes.status();
  EXPECT_TRUE(notes->empty());
  absl::StatusOr<TorchStateDict> io = ReadTorchStateDict(Fixture("torch_save_cnn_bn_io.pt"));
  ASSERT_TRUE(io.ok()) << io.status();
  (*model)->Eval();
  const std::vector<double> ours = Values((*model)->Forward(Find(io->tensors, "input")));
  const std::vector<double> theirs = Values(Find(io->tensors, "logits"));
  ASSERT_EQ(ours.size(), theirs.size());
  for (size_t i = 0; i < ours.size(); ++i)
    EXPECT_NEAR(ours[i], theirs[i], 1e-5 * (1 + std::abs(theirs[i]))) << i;
}

NamedTensors SomeTensors() {
  Tensor f32 = Tensor::Empty({2, 3}, DType::kFloat32);
  for (int i = 0; i < 6; ++i) static_cast<float*>(f32.raw_data())[i] = 0.25f * static_cast<float>(i) - 1;
  Tensor count = Tensor::Empty({}, DType::kInt64);
  *static_cast<int64_t*>(count.raw_data()) = int64_t{5} << 33;
  return {{"layer.weight", f32},
          {"layer.num_batches_tracked", count},
          {"half", ToDType(f32, DType::kFloat16)},
          {"brain", ToDType(f32, DType::kBFloat16)},
          {"empty", Tensor::Empty({0, 4}, DType::kFloat32)}};
}

TEST(TorchSaveTest, WhatWeWriteReadsBackBitForBit) {
  const NamedTensors tensors = SomeTensors();
  absl::StatusOr<std::string> image = SerializeTorchStateDict(tensors);
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_TRUE(LooksLikeTorchSave(*image));
  absl::StatusOr<TorchStateDict> read = ParseTorchStateDict(*image, "ours.pt");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(read->notes.empty());
  ASSERT_EQ(read->tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(read->tensors[i].first, tensors[i].first);
    EXPECT_EQ(read->tensors[i].second.dtype(), tensors[i].second.dtype());
    EXPECT_EQ(read->tensors[i].second.shape(), tensors[i].second.shape());
    EXPECT_EQ(
        std::string(static_cast<const char*>(read->tensors[i].second.raw_data()),
                    read->tensors[i].second.nbytes()),
        std::string(static_cast<const char*>(tensors[i].second.raw_data()), tensors[i].second.nbytes()));
  }
  EXPECT_THAT(
      SerializeTorchStateDict({{"a", Tensor::Empty({1})}, {"a", Tensor::Empty({1})}}).status().message(),
      HasSubstr("\"a\" appears twice"));
}

// Each installed PyTorch (Debian's 1.13, PyPI's 2.x) reads what we write with weights_only=True.
TEST(TorchSaveTest, PyTorchLoadsWhatWeWrite) {
  const std::string path = TempPath("ours.pt");
  ASSERT_TRUE(SaveTorchStateDict(path, SomeTensors()).ok());
  int ran = 0;
  for (const char* python : {"/usr/bin/python3", "/opt/torch2/bin/python"}) {
    if (RunShell(absl::StrCat(python, " -c 'import torch' 2>/dev/null")).exit_code != 0) continue;
    ++ran;
    const ProcessResult listed = RunProcess(
        {python, "-c",
         "import sys, torch\n"
         "sd = torch.load(sys.argv[1], weights_only=True)\n"
         "for k, v in sd.items(): print(k, str(v.dtype), list(v.shape), float(v.double().sum()))\n",
         path});
    ASSERT_EQ(listed.exit_code, 0) << python << ": " << listed.err;
    EXPECT_EQ(listed.out,
              "layer.weight torch.float32 [2, 3] -2.25\n"
              "layer.num_batches_tracked torch.int64 [] 42949672960.0\n"
              "half torch.float16 [2, 3] -2.25\n"
              "brain torch.bfloat16 [2, 3] -2.25\n"
              "empty torch.float32 [0, 4] 0.0\n")
        << python;
  }
  if (ran == 0) GTEST_SKIP() << "no Python with torch here";
}

// Our cnn_bn saved as model.pt loads into the reference model with strict names in PyTorch 2.x, which
// computes the logits we compute.
TEST(TorchSaveTest, OurCnnBnWeightsGiveOurLogitsInPyTorch) {
  const std::string python = "/opt/torch2/bin/python";
  if (RunShell(python + " -c 'import torch' 2>/dev/null").exit_code != 0) GTEST_SKIP() << "no " << python;
  Generator generator(3);
  absl::StatusOr<std::shared_ptr<Module>> model = MakeModel("cnn_bn", generator, ModelInput{{1, 4, 4}, 10});
  ASSERT_TRUE(model.ok());
  const std::string path = TempPath("cnn_bn.pt");
  ASSERT_TRUE(SaveModuleWeights(**model, path).ok());
  absl::StatusOr<TorchStateDict> io = ReadTorchStateDict(Fixture("torch_save_cnn_bn_io.pt"));
  ASSERT_TRUE(io.ok());
  (*model)->Eval();
  const std::vector<double> ours = Values((*model)->Forward(Find(io->tensors, "input")));
  const ProcessResult run =
      RunProcess({python, "-c",
                  "import sys, torch\n"
                  "sys.path.insert(0, sys.argv[1])\n"
                  "import reference_models\n"
                  "m = reference_models.make_model('cnn_bn', (1, 4, 4), 10)\n"
                  "m.load_state_dict(torch.load(sys.argv[2], weights_only=True), strict=True)\n"
                  "m.eval()\n"
                  "x = torch.load(sys.argv[3], weights_only=True)['input']\n"
                  "print(' '.join(repr(v) for v in m(x).detach().flatten().tolist()))\n",
                  Runfile("tools"), path, Fixture("torch_save_cnn_bn_io.pt")});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  std::vector<double> theirs;
  for (absl::string_view v : absl::StrSplit(absl::StripTrailingAsciiWhitespace(run.out), ' ')) {
    theirs.push_back(std::stod(std::string(v)));
  }
  ASSERT_EQ(ours.size(), theirs.size());
  for (size_t i = 0; i < ours.size(); ++i)
    EXPECT_NEAR(ours[i], theirs[i], 1e-5 * (1 + std::abs(theirs[i]))) << i;
}

TEST(TorchSaveTest, TakesTheOneStateDictOfACheckpointWithoutItsWrapperPrefix) {
  absl::StatusOr<TorchStateDict> read = ReadTorchStateDict(Fixture("torch_save_checkpoint.pt"));
  ASSERT_TRUE(read.ok()) << read.status();
  std::vector<std::string> names;
  for (const auto& [name, t] : read->tensors) names.push_back(name);
  EXPECT_THAT(names, ElementsAre("0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean",
                                 "1.running_var", "1.num_batches_tracked"));
  EXPECT_THAT(read->notes, ElementsAre("took the state_dict under the key \"model\"",
                                       "removed the prefix \"module.\" from every name"));
}

// A state_dict whose names all carry a prefix the model's lack (a Lightning checkpoint's "model.") loads
// with the prefix removed, in either format; a prefix that would not make every name the model's is kept,
// and the load fails naming the keys.
TEST(TorchSaveTest, APrefixEveryNameHasAndTheModelLacksIsRemoved) {
  Generator generator(4);
  absl::StatusOr<std::shared_ptr<Module>> source = MakeModel("cnn_bn", generator, ModelInput{{1, 4, 4}, 10});
  absl::StatusOr<std::shared_ptr<Module>> target = MakeModel("cnn_bn", generator, ModelInput{{1, 4, 4}, 10});
  ASSERT_TRUE(source.ok() && target.ok());
  NamedTensors prefixed, partly;
  for (const auto& [name, tensor] : (*source)->StateDict()) {
    prefixed.emplace_back("model." + name, tensor);
    partly.emplace_back(partly.empty() ? "model." + name : "other." + name, tensor);
  }
  for (const char* file : {"prefixed.pt", "prefixed.safetensors"}) {
    const std::string path = TempPath(file);
    ASSERT_TRUE(
        (absl::EndsWith(path, ".pt") ? SaveTorchStateDict(path, prefixed) : SaveSafetensors(path, prefixed))
            .ok());
    absl::StatusOr<std::vector<std::string>> notes = LoadModuleWeights(**target, path);
    ASSERT_TRUE(notes.ok()) << notes.status();
    EXPECT_THAT(*notes,
                ElementsAre("removed the prefix \"model.\" that every name has and the model's lack"));
    for (const auto& [name, tensor] : (*target)->StateDict()) {
      EXPECT_EQ(Values(tensor), Values(Find((*source)->StateDict(), name))) << file << " " << name;
    }
  }
  const std::string path = TempPath("partly.pt");
  ASSERT_TRUE(SaveTorchStateDict(path, partly).ok());
  EXPECT_THAT(LoadModuleWeights(**target, path).status().message(),
              HasSubstr("unexpected key(s): \"model.conv1.weight\""));
}

// Fine-tuning with a new head: weights of a 100-class model load into a 10-class one with fc2. kept
// initial; without it the head's shapes are named, and a prefix that names nothing is refused.
TEST(TorchSaveTest, TensorsUnderAKeptPrefixKeepTheirInitialValues) {
  Generator generator(6);
  absl::StatusOr<std::shared_ptr<Module>> source = MakeModel("cnn_bn", generator, ModelInput{{1, 4, 4}, 100});
  absl::StatusOr<std::shared_ptr<Module>> target = MakeModel("cnn_bn", generator, ModelInput{{1, 4, 4}, 10});
  ASSERT_TRUE(source.ok() && target.ok());
  const std::string path = TempPath("hundred_classes.pt");
  ASSERT_TRUE(SaveModuleWeights(**source, path).ok());
  EXPECT_THAT(LoadModuleWeights(**target, path).status().message(),
              HasSubstr("\"fc2.weight\": checkpoint has"));
  const std::vector<double> initial_head = Values(Find((*target)->StateDict(), "fc2.weight"));
  absl::StatusOr<std::vector<std::string>> notes = LoadModuleWeights(**target, path, true, {"fc2."});
  ASSERT_TRUE(notes.ok()) << notes.status();
  EXPECT_THAT(*notes, ElementsAre("kept the initial values of 2 tensor(s) under fc2."));
  EXPECT_EQ(Values(Find((*target)->StateDict(), "fc2.weight")), initial_head);
  EXPECT_EQ(Values(Find((*target)->StateDict(), "conv1.weight")),
            Values(Find((*source)->StateDict(), "conv1.weight")));
  EXPECT_EQ(Values(Find((*target)->StateDict(), "bn2.running_var")),
            Values(Find((*source)->StateDict(), "bn2.running_var")));
  EXPECT_THAT(LoadModuleWeights(**target, path, true, {"fc3."}).status().message(),
              HasSubstr("the prefix \"fc3.\" to keep initial names none of the model's tensors"));
}

TEST(TorchSaveTest, NamesWhatItHoldsWhenItIsNotOneStateDict) {
  const std::string two = Fixture("torch_save_two_models.pt");
  EXPECT_THAT(
      ReadTorchStateDict(two).status().message(),
      HasSubstr("holds a dict that is not a state_dict and has 2 among its values (model (a state_dict of "
                "7 tensors), ema (a state_dict of 7 tensors)); save the one state_dict to load"));
  EXPECT_THAT(
      ReadTorchStateDict(Fixture("torch_save_module.pt")).status().message(),
      HasSubstr("holds an object made by torch.nn.modules.linear Linear, not a state_dict (a whole module? "
                "save its state_dict() instead)"));
  EXPECT_THAT(ReadTorchStateDict(Fixture("torch_save_script.pt")).status().message(),
              HasSubstr("a TorchScript archive (torch.jit.save)"));
  EXPECT_EQ(ReadTorchStateDict(TempPath("no_such.pt")).status().code(), absl::StatusCode::kNotFound);
}

// The archive of SomeTensors() with its members changed by `edit` and packed again (CRC-32s recomputed).
std::string Repacked(void (*edit)(std::string& name, std::string& data)) {
  const std::string image = *SerializeTorchStateDict(SomeTensors());
  std::vector<std::string> names, datas;
  const std::vector<ZipMember> read = *ReadZipArchive(image, "ours");
  for (const ZipMember& m : read) {
    names.push_back(m.name);
    datas.emplace_back(m.data);
    edit(names.back(), datas.back());
  }
  std::vector<ZipMember> members;
  for (size_t i = 0; i < names.size(); ++i) members.push_back({names[i], datas[i]});
  return WriteZipArchive(members);
}

// The legacy format has no checksums: every cut and flipped byte ends in a named error or in tensors of
// the right names and shapes (a flip inside the raw storages changes values nobody can check).
TEST(TorchSaveTest, DamagedLegacyFilesEndInErrorsOrWholeTensors) {
  absl::StatusOr<std::string> image = ReadFile(Fixture("torch_save_views_2.15_legacy.pt"));
  ASSERT_TRUE(image.ok()) << image.status();
  for (size_t cut = 0; cut < image->size(); ++cut) {
    absl::StatusOr<TorchStateDict> read = ParseTorchStateDict(image->substr(0, cut), "cut.pt");
    ASSERT_FALSE(read.ok()) << cut;
    EXPECT_THAT(read.status().message(), HasSubstr("cut.pt")) << cut;
  }
  std::mt19937 random(5);
  int read_whole = 0;
  for (int trial = 0; trial < 5000; ++trial) {
    std::string bytes = *image;
    bytes[random() % bytes.size()] ^= static_cast<char>(1 + random() % 255);
    absl::StatusOr<TorchStateDict> read = ParseTorchStateDict(bytes, "flip.pt");
    if (!read.ok()) {
      EXPECT_THAT(read.status().message(), HasSubstr("flip.pt")) << trial;
      continue;
    }
    ++read_whole;
    for (const auto& [name, tensor] : read->tensors) EXPECT_GE(tensor.numel(), 0) << name;
  }
  EXPECT_GT(read_whole, 0);  // flips in the raw storages
}

// Ours and PyTorch 2.15's (data descriptors, padding, ZIP64 records): every cut is an error, and a flipped
// byte is an error naming the file or changes nothing (the CRC-32s cover every member).
TEST(TorchSaveTest, DamagedArchivesEndInErrorsNamingTheFileAndTensor) {
  const std::string ours = *SerializeTorchStateDict(SomeTensors());
  const std::string theirs = *ReadFile(Fixture("torch_save_views_2.15.pt"));
  for (const std::string& image : {ours, theirs}) {
    const absl::StatusOr<TorchStateDict> whole = ParseTorchStateDict(image, "whole.pt");
    ASSERT_TRUE(whole.ok()) << whole.status();
    for (size_t cut = 0; cut < image.size(); ++cut) {
      absl::StatusOr<TorchStateDict> read = ParseTorchStateDict(image.substr(0, cut), "cut.pt");
      ASSERT_FALSE(read.ok()) << cut;
      EXPECT_THAT(read.status().message(), HasSubstr("cut.pt")) << cut;
    }
    std::mt19937 random(3);
    for (int trial = 0; trial < 3000; ++trial) {
      std::string bytes = image;
      bytes[random() % bytes.size()] ^= static_cast<char>(1 + random() % 255);
      absl::StatusOr<TorchStateDict> read = ParseTorchStateDict(bytes, "flip.pt");
      if (!read.ok()) {
        EXPECT_THAT(read.status().message(), HasSubstr("flip.pt")) << trial;
        continue;
      }
      ASSERT_EQ(read->tensors.size(), whole->tensors.size()) << trial;
      for (size_t i = 0; i < whole->tensors.size(); ++i) {
        EXPECT_EQ(read->tensors[i].first, whole->tensors[i].first) << trial;
        EXPECT_EQ(Values(read->tensors[i].second), Values(whole->tensors[i].second)) << trial;
      }
    }
  }
  struct Case {
    void (*edit)(std::string& name, std::string& data);
    const char* message;
  };
  const Case cases[] = {
      {[](std::string& n, std::string& d) {
         if (n == "archive/data/0") d.resize(20);
       },
       "tensor \"layer.weight\": its storage archive/data/0 holds 20 bytes, not 6 elements of 4 bytes"},
      {[](std::string& n, std::string&) {
         if (n == "archive/data/2") n = "archive/data/x";
       },
       "tensor \"half\": its storage 2 is not in the file"},
      {[](std::string& n, std::string& d) {
         if (n == "archive/byteorder") d = "big";
       },
       "saved on a machine of byte order \"big\""},
      {[](std::string& n, std::string& d) {
         if (n == "archive/data.pkl")
           d = absl::StrReplaceAll(d, {{"torch\nHalfStorage", "torch\nComplexFloatStorage"}});
       },
       "tensor \"half\": its storage type torch ComplexFloatStorage is not one the engine holds"},
      {[](std::string& n, std::string& d) {
         if (n == "archive/data.pkl")
           d = absl::StrReplaceAll(
               d, {{std::string("cpuJ\006\000\000\000", 8), std::string("cpuJ\005\000\000\000", 8)}});
         if (n == "archive/data/0") d.resize(20);
       },
       "tensor \"layer.weight\": its view selects more elements than its storage holds"},
      {[](std::string& n, std::string& d) {
         if (n == "archive/data.pkl")
           d = absl::StrReplaceAll(
               d, {{std::string("QJ\000\000\000\000", 6), std::string("QJ\001\000\000\000", 6)}});
       },
       "tensor \"layer.weight\": its view reaches element 6 of a storage of 6"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(ParseTorchStateDict(Repacked(c.edit), "edited.pt").status().message(), HasSubstr(c.message));
  }
}

}  // namespace
}  // namespace ddp
