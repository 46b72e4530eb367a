#include "testing/cifar_files.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"

namespace ddp {
namespace {

constexpr int kSide = 32, kPlane = kSide * kSide, kSquare = 12;

// Ten colours far apart in RGB.
const uint8_t kColours[10][3] = {{255, 0, 0},     {0, 255, 0},    {0, 0, 255},   {255, 255, 0},
                                 {255, 0, 255},   {0, 255, 255},  {255, 128, 0}, {128, 0, 255},
                                 {255, 255, 255}, {128, 128, 128}};

// Python 2 cPickle's protocol-2 output, built opcode by opcode.
class Py2Pickle {
 public:
  Py2Pickle() { bytes_ = std::string("\x80\x02", 2); }
  Py2Pickle& Op(char op) {
    bytes_.push_back(op);
    return *this;
  }
  Py2Pickle& Raw(const std::string& raw) {
    bytes_ += raw;
    return *this;
  }
  Py2Pickle& Put() {  // BINPUT / LONG_BINPUT of the next memo index, as cPickle memoizes
    const uint32_t index = ++memo_;
    if (index < 256) return Op('q').Op(static_cast<char>(index));
    return Op('r').Raw(Le(index, 4));
  }
  Py2Pickle& Int(int64_t v) {  // BININT1, BININT2 or BININT
    if (v >= 0 && v < 256) return Op('K').Op(static_cast<char>(v));
    if (v >= 0 && v < 65536) return Op('M').Raw(Le(static_cast<uint32_t>(v), 2));
    return Op('J').Raw(Le(static_cast<uint32_t>(v), 4));
  }
  Py2Pickle& Str(const std::string& s) {  // a Python 2 str: SHORT_BINSTRING or BINSTRING, memoized
    if (s.size() < 256) {
      Op('U').Op(static_cast<char>(s.size()));
    } else {
      Op('T').Raw(Le(static_cast<uint32_t>(s.size()), 4));
    }
    return Raw(s).Put();
  }
  Py2Pickle& IntList(const std::vector<int64_t>& values) {  // EMPTY_LIST, then APPENDS of up to 1000
    Op(']').Put();
    for (size_t i = 0; i < values.size(); i += 1000) {
      Op('(');
      for (size_t j = i; j < std::min(values.size(), i + 1000); ++j) Int(values[j]);
      Op('e');
    }
    return *this;
  }
  const std::string& bytes() const { return bytes_; }

 private:
  static std::string Le(uint32_t v, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    return out;
  }
  std::string bytes_;
  uint32_t memo_ = 0;
};

}  // namespace

void WritePickledCifarFile(const std::string& path, const std::vector<CifarRecord>& records, bool cifar100) {
  std::string raw;
  std::vector<int64_t> labels, coarse;
  for (const CifarRecord& record : records) {
    raw.append(reinterpret_cast<const char*>(record.pixels.data()), record.pixels.size());
    labels.push_back(record.label);
    coarse.push_back(record.coarse_label);
  }
  Py2Pickle p;
  p.Op('}').Put().Op('(');
  // "data": numpy.core.multiarray._reconstruct(numpy.ndarray, (0,), 'b'), then BUILD with its state.
  p.Str("data").Op('c').Raw("numpy.core.multiarray\n_reconstruct\n").Put();
  p.Op('c').Raw("numpy\nndarray\n").Put().Int(0).Op('\x85').Str("b").Op('\x87').Op('R').Put();
  p.Op('(').Int(1).Int(static_cast<int64_t>(records.size())).Int(3 * kPlane).Op('\x86');
  p.Op('c').Raw("numpy\ndtype\n").Put().Str("u1").Int(0).Int(1).Op('\x87').Op('R').Put();
  p.Op('(').Int(3).Str("|").Op('N').Op('N').Op('N').Op('J').Raw(std::string(4, '\xff'));
  p.Op('J').Raw(std::string(4, '\xff')).Int(0).Op('t').Op('b');
  p.Op('\x89').Str(raw).Op('t').Op('b');
  if (cifar100) {
    p.Str("fine_labels").IntList(labels).Str("coarse_labels").IntList(coarse);
  } else {
    p.Str("labels").IntList(labels);
  }
  p.Str("batch_label").Str("testing batch 1 of 1");
  p.Str("filenames").Op(']').Put();
  for (size_t i = 0; i < records.size(); i += 1000) {
    p.Op('(');
    for (size_t j = i; j < std::min(records.size(), i + 1000); ++j) p.Str(absl::StrCat("image_", j, ".png"));
    p.Op('e');
  }
  p.Op('u').Op('.');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  ASSERT_TRUE(out.good()) << "cannot create " << path;
  out.write(p.bytes().data(), static_cast<std::streamsize>(p.bytes().size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

std::vector<CifarRecord> SyntheticCifarRecords(int64_t n, int num_classes, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::uniform_int_distribution<int> noise(0, 63), corner(0, kSide - kSquare);
  std::vector<CifarRecord> records(n);
  for (int64_t i = 0; i < n; ++i) {
    CifarRecord& record = records[i];
    record.label = static_cast<int>(i % num_classes);
    record.coarse_label = record.label / 5;
    record.pixels.resize(3 * kPlane);
    for (uint8_t& p : record.pixels) p = static_cast<uint8_t>(noise(random));
    const int top = corner(random), left = corner(random);
    const uint8_t* colour = kColours[record.label % 10];
    for (int c = 0; c < 3; ++c) {
      for (int y = top; y < top + kSquare; ++y) {
        for (int x = left; x < left + kSquare; ++x) record.pixels[c * kPlane + y * kSide + x] = colour[c];
      }
    }
  }
  return records;
}

void WriteCifarFile(const std::string& path, const std::vector<CifarRecord>& records, bool cifar100) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  ASSERT_TRUE(out.good()) << "cannot create " << path;
  for (const CifarRecord& record : records) {
    ASSERT_EQ(record.pixels.size(), size_t{3 * kPlane});
    if (cifar100) out.put(static_cast<char>(record.coarse_label));
    out.put(static_cast<char>(record.label));
    out.write(reinterpret_cast<const char*>(record.pixels.data()),
              static_cast<std::streamsize>(record.pixels.size()));
  }
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

void WriteSyntheticCifar10(const std::string& dir, int64_t train, int64_t test, uint64_t seed) {
  ::mkdir(dir.c_str(), 0755);
  const std::vector<CifarRecord> train_records = SyntheticCifarRecords(train, 10, seed);
  for (int64_t file = 0; file < 5; ++file) {
    const auto begin = train_records.begin() + file * train / 5,
               end = train_records.begin() + (file + 1) * train / 5;
    WriteCifarFile(absl::StrCat(dir, "/data_batch_", file + 1, ".bin"), std::vector<CifarRecord>(begin, end));
  }
  WriteCifarFile(dir + "/test_batch.bin", SyntheticCifarRecords(test, 10, seed + 1));
}

}  // namespace ddp
