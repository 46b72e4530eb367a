#include "ddp/desync_check.h"

#include "base/fnv1a.h"

#include <set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tensor/autograd.h"
#include "tensor/dtype.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

uint64_t TensorChecksum(const Tensor& tensor) {
  const Tensor host = HostContiguous(tensor);
  const std::string geometry =
      absl::StrCat(DTypeName(host.dtype()), "[", absl::StrJoin(host.shape(), ","), "]");
  return Fnv1a64(host.raw_data(), host.nbytes(), Fnv1a64(geometry.data(), geometry.size(), kFnv1a64Offset));
}

// One line per tensor: "<name>\t<hex checksum>\n".
std::string Encode(const std::vector<std::pair<std::string, uint64_t>>& sums) {
  std::string out;
  for (const auto& [name, sum] : sums) absl::StrAppend(&out, name, "\t", absl::StrFormat("%016x", sum), "\n");
  return out;
}

// Inverse of Encode; the line text itself stands for the (name, checksum) pair.
std::vector<std::string> Lines(const std::string& encoded) {
  return absl::StrSplit(encoded, '\n', absl::SkipEmpty());
}

std::string NameOf(const std::string& line) { return line.substr(0, line.find('\t')); }

}  // namespace

std::vector<std::pair<std::string, uint64_t>> StateChecksums(const Module& module) {
  std::vector<std::pair<std::string, uint64_t>> sums;
  for (const auto& [name, tensor] : module.StateDict()) sums.emplace_back(name, TensorChecksum(tensor));
  return sums;
}

namespace {

// StateChecksums without the buffers when the options say they are re-broadcast.
std::vector<std::pair<std::string, uint64_t>> ComparedChecksums(const Module& module,
                                                                 const DesyncCheckOptions& options) {
  if (options.compare_buffers) return StateChecksums(module);
  std::vector<std::pair<std::string, uint64_t>> sums;
  for (const auto& [name, tensor] : module.NamedParameters()) sums.emplace_back(name, TensorChecksum(tensor));
  return sums;
}

}  // namespace

absl::Status CheckReplicasInSync(const Module& module, ProcessGroup& group,
                                 const DesyncCheckOptions& options) {
  std::vector<std::string> gathered;
  const absl::Status gather = group.AllGatherObject(Encode(ComparedChecksums(module, options)), &gathered);
  if (!gathered.empty() && gather.ok() && static_cast<int>(gathered.size()) != group.size()) {
    return absl::InternalError("CheckReplicasInSync: AllGatherObject returned the wrong number of ranks");
  }
  if (!gather.ok())
    return absl::Status(gather.code(), absl::StrCat("CheckReplicasInSync: ", gather.message()));
  std::vector<std::vector<std::string>> lines;
  size_t longest = 0;
  for (const std::string& g : gathered) {
    lines.push_back(Lines(g));
    longest = std::max(longest, lines.back().size());
  }
  std::set<std::string> parameters;
  for (const auto& [name, tensor] : module.NamedParameters()) parameters.insert(name);
  for (size_t i = 0; i < longest; ++i) {
    const std::string reference = i < lines[0].size() ? lines[0][i] : "";
    std::vector<int> differing;
    std::string name = NameOf(reference);
    for (int r = 1; r < static_cast<int>(lines.size()); ++r) {
      const std::string mine = i < lines[r].size() ? lines[r][i] : "";
      if (mine == reference) continue;
      differing.push_back(r);
      if (name.empty()) name = NameOf(mine);
    }
    if (differing.empty()) continue;
    const char* kind = parameters.count(name) ? "parameter" : "buffer";
    const bool names_differ = [&] {
      for (int r : differing) {
        if (i >= lines[r].size() || NameOf(lines[r][i]) != NameOf(reference)) return true;
      }
      return false;
    }();
    return absl::FailedPreconditionError(
        absl::StrCat("replicas out of sync: ", kind, " \"", name, "\" (state tensor ", i, ") ",
                     names_differ ? "has a different name or is missing on" : "differs from rank 0's on",
                     differing.size() == 1 ? " rank " : " ranks ", absl::StrJoin(differing, ", ")));
  }
  return absl::OkStatus();
}

absl::Status MaybeCheckReplicasInSync(const Module& module, ProcessGroup& group, int64_t step,
                                      int64_t every_n_steps, const DesyncCheckOptions& options) {
  if (every_n_steps <= 0 || step % every_n_steps != 0) return absl::OkStatus();
  return CheckReplicasInSync(module, group, options);
}

}  // namespace ddp
