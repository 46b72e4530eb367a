// Test-only text files of numbers for the iterable-dataset tests: one number per line, parsed into
// examples whose target is the line number.
#ifndef DDP_TESTING_NUMBER_LINES_H_
#define DDP_TESTING_NUMBER_LINES_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "data/dataset.h"

namespace ddp {

// Writes `lines` lines "scale", "2 * scale", ... (line `bad_line`, 1-based, is "x" instead) to `name` in
// the test's scratch directory; returns the path.
std::string WriteNumberLines(const std::string& name, int64_t lines, int64_t scale = 1, int64_t bad_line = -1);

// Line "v" becomes (input [1] = v, target = line_number); a line that is not a number is an error
// quoting it. A TextLineDataset parser.
absl::StatusOr<Example> ParseNumberLine(absl::string_view line, int64_t line_number);

}  // namespace ddp

#endif  // DDP_TESTING_NUMBER_LINES_H_
