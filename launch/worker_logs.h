// torchrun's log layout for the workers of one ddprun: which streams go to files (--redirects, --tee),
// the per-attempt folder tree, and the error files PyTorch's @record writes (TORCHELASTIC_ERROR_FILE).
#ifndef DDP_LAUNCH_WORKER_LOGS_H_
#define DDP_LAUNCH_WORKER_LOGS_H_

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ddp {

// Which of a worker's two streams a setting covers (torchrun's Std: 0 none, 1 stdout, 2 stderr, 3 both).
struct StdStreams {
  bool out = false;
  bool err = false;
};

// torchrun's --redirects / --tee value: one setting for every local rank ("3"), or per local rank
// ("0:1,1:2"; ranks not named get none).
struct StdStreamsByRank {
  StdStreams all;
  std::map<int, StdStreams> by_local_rank;  // When not empty, only these ranks have a setting.
  // The setting of `local_rank`.
  StdStreams For(int local_rank) const;
  // True when some rank has a stream set.
  bool Any() const;
};

// Parses "0".."3" or "LOCAL_RANK:0..3[,LOCAL_RANK:0..3...]"; kInvalidArgument naming `flag` otherwise.
absl::StatusOr<StdStreamsByRank> ParseStdStreams(absl::string_view flag, absl::string_view text);

// The folder tree of one ddprun, torchrun's layout:
//   <base>/<run_id>_<random>/attempt_<restart>/<local_rank>/{stdout.log, stderr.log, error.json}
// where <base> is --log_dir, or a fresh temporary folder ($TMPDIR or /tmp, "ddprun_XXXXXX") that the
// destructor removes unless Keep() was called. Not thread-safe.
class WorkerLogTree {
 public:
  // Creates <base> (when temporary) and the run folder. `log_dir` "" means temporary.
  static absl::StatusOr<std::unique_ptr<WorkerLogTree>> Create(const std::string& log_dir,
                                                               const std::string& run_id);
  ~WorkerLogTree();
  WorkerLogTree(const WorkerLogTree&) = delete;
  WorkerLogTree& operator=(const WorkerLogTree&) = delete;

  // Creates attempt_<restart>/<local_rank> for local ranks [0, nproc) (an older attempt folder of that
  // number is emptied first, as torchrun does).
  absl::Status StartAttempt(int restart, int nproc);
  // <run>/attempt_<restart>, where torchrun's filtered_stdout.log and filtered_stderr.log go.
  std::string AttemptDir(int restart) const;
  // <run>/attempt_<restart>/<local_rank>/<name>, e.g. name "error.json".
  std::string WorkerFile(int restart, int local_rank, absl::string_view name) const;
  // The run folder.
  const std::string& run_dir() const { return run_dir_; }
  // Keep a temporary tree when this object is destroyed (it holds logs the user asked for).
  void Keep() { keep_ = true; }

 private:
  WorkerLogTree(std::string temporary_base, std::string run_dir)
      : temporary_base_(std::move(temporary_base)), run_dir_(std::move(run_dir)) {}
  const std::string temporary_base_;  // "" when under --log_dir.
  const std::string run_dir_;
  bool keep_ = false;
};

// The message of an error file written by PyTorch's @record (torch.distributed.elastic): its
// "message.message" and, when present, the "message.extraInfo.py_callstack" traceback. nullopt when the
// file is missing, empty or not of that form (a worker that died without writing one).
std::optional<std::string> ReadWorkerErrorFile(const std::string& path);

}  // namespace ddp

#endif  // DDP_LAUNCH_WORKER_LOGS_H_
