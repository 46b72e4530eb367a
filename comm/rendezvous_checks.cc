#include "comm/rendezvous_checks.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace ddp {

// Note [Rendezvous checks]
// Ranks started by hand can disagree on WORLD_SIZE. Gloo then fails deep inside its own rendezvous
// ("enforce fail at address.cc:45 ... 136 vs 272", from parsing a peer's address list sized for another
// world), or a rank waits for a peer that its world does not have. So before the backend's rendezvous,
// each rank CompareSets one key: the first rank to arrive writes its size, every later rank reads the
// first one's back in the same round trip and fails at once on a difference, naming both values. The
// refusing rank also writes its size under a per-rank key, so the ranks that do go on and wait for it
// (their world includes it) can say why it never joined. Both the first rank's value and that per-rank
// key are read only on error paths. A rank that exits before rendezvous makes the others wait the full
// timeout; their error then names the ranks whose presence key is missing ("rank 1 never joined")
// instead of the store key Gloo happened to be waiting for.

namespace {

constexpr char kWorldSizeKey[] = "rendezvous/world_size";

std::string RefusedKey(int rank) { return absl::StrCat("rendezvous/refused_world_size/", rank); }

// The size and rank in a value written by CheckSameWorldSize: "<size> (rank <rank>)".
bool ParseSizeRecord(absl::string_view record, int* size, int* rank) {
  std::vector<absl::string_view> words = absl::StrSplit(record, absl::ByAnyChar(" ()"), absl::SkipEmpty());
  return words.size() == 3 && absl::SimpleAtoi(words[0], size) && absl::SimpleAtoi(words[2], rank);
}

}  // namespace

absl::Status CheckSameWorldSize(Store& store, int rank, int size) {
  const std::string mine = absl::StrCat(size, " (rank ", rank, ")");
  absl::StatusOr<std::string> first = store.CompareSet(kWorldSizeKey, "", mine);
  if (!first.ok()) return first.status();
  int first_size = 0, first_rank = 0;
  if (*first == mine || (ParseSizeRecord(*first, &first_size, &first_rank) && first_size == size)) {
    return absl::OkStatus();
  }
  (void)store.Set(RefusedKey(rank), absl::StrCat(size));  // best effort: only improves others' errors
  const std::string other = first_size > 0 ? absl::StrCat("rank ", first_rank, " with WORLD_SIZE=", first_size)
                                           : absl::StrCat("another rank with \"", *first, "\"");
  return absl::FailedPreconditionError(absl::StrCat("rank ", rank, " was started with WORLD_SIZE=", size,
                                                    " but ", other,
                                                    " (every rank of a group needs the same world size)"));
}

std::vector<int> RanksNotJoined(Store& store, int rank, int size,
                                const std::function<std::string(int)>& presence_key) {
  std::vector<int> missing;
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    absl::StatusOr<std::string> value = store.Get(presence_key(r), absl::ZeroDuration());
    if (absl::IsDeadlineExceeded(value.status())) missing.push_back(r);
  }
  return missing;
}

std::string DescribeNeverJoined(Store& store, const std::vector<int>& missing) {
  if (missing.empty()) return "";
  std::vector<std::string> refusals;
  for (int r : missing) {
    absl::StatusOr<std::string> size = store.Get(RefusedKey(r), absl::ZeroDuration());
    if (size.ok()) refusals.push_back(absl::StrCat("rank ", r, " was started with WORLD_SIZE=", *size));
  }
  std::string text = absl::StrCat(missing.size() == 1 ? "rank " : "ranks ", absl::StrJoin(missing, ", "),
                                  " never joined");
  if (!refusals.empty()) absl::StrAppend(&text, " (", absl::StrJoin(refusals, "; "), ")");
  return text;
}

}  // namespace ddp
