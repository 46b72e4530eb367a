#include "testing/number_lines.h"

#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "testing/process.h"

namespace ddp {

std::string WriteNumberLines(const std::string& name, int64_t lines, int64_t scale, int64_t bad_line) {
  const std::string path = TempPath(name);
  std::ofstream out(path);
  for (int64_t i = 1; i <= lines; ++i) out << (i == bad_line ? std::string("x") : std::to_string(i * scale)) << "\n";
  return path;
}

absl::StatusOr<Example> ParseNumberLine(absl::string_view line, int64_t line_number) {
  int64_t value;
  if (!absl::SimpleAtoi(line, &value)) return absl::InvalidArgumentError(absl::StrCat("not a number: \"", line, "\""));
  Example example{Tensor::Empty({1}), Tensor::Empty({}, DType::kInt64)};
  example.input.data<float>()[0] = static_cast<float>(value);
  example.target.data<int64_t>()[0] = line_number;
  return example;
}

}  // namespace ddp
