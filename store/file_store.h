// FileStore: a Store in one file on a filesystem that every process of the job can see
// (`file:///shared/path`), for jobs without a reachable TCP master.
#ifndef DDP_STORE_FILE_STORE_H_
#define DDP_STORE_FILE_STORE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "store/kv_table.h"
#include "store/store.h"
#include "base/unique_fd.h"

namespace ddp {

// Options of FileStore::Create.
struct FileStoreOptions {
  // Largest key or value accepted (larger records in the file are treated as corruption).
  size_t max_value_bytes = size_t{64} << 20;  // 64 MiB
  // Blocking Get/Wait re-read the file with exponential backoff from 1 ms up to this interval.
  absl::Duration max_poll_interval = absl::Milliseconds(50);
};

// A Store kept in an append-only log file (format in store/file_store_log.h), safe for several
// processes and several FileStore instances at once: every read takes flock(LOCK_SH) on the file,
// every write flock(LOCK_EX), and each instance keeps a replayed cache of the log plus the offset it
// has read up to. A corrupt or foreign file gives kDataLoss / kFailedPrecondition errors.
// The file only grows (no compaction) and is never deleted by FileStore: the caller owns it and
// should use a fresh path per job. Blocking calls poll the file with backoff (see options); there is
// no cross-process notification. Thread safety: all methods are thread-safe.
class FileStore : public Store {
 public:
  // Opens (creating if needed) the store file at `path`. Fails when the file cannot be opened or
  // does not hold a FileStore log.
  static absl::StatusOr<std::unique_ptr<FileStore>> Create(const std::string& path,
                                                           FileStoreOptions options = {});

  // Returns the path of a "file:///abs/path" URL; kInvalidArgument for anything else.
  static absl::StatusOr<std::string> PathFromUrl(absl::string_view url);

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::StatusOr<std::string> CompareSet(absl::string_view key, absl::string_view expected,
                                         absl::string_view desired) override;
  absl::StatusOr<bool> DeleteKey(absl::string_view key) override;
  absl::Status Wait(absl::Span<const std::string> keys, absl::Duration timeout) override;
  absl::StatusOr<int64_t> NumKeys() override;

  const std::string& path() const { return path_; }

 private:
  FileStore(std::string path, UniqueFd fd, FileStoreOptions options);

  class ScopedFileLock;
  // Takes flock(`lock_op`) through `lock` and brings the cache up to date.
  absl::Status LockAndCatchUp(int lock_op, ScopedFileLock* lock) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads the records appended since offset_ into the cache. REQUIRES: flock held.
  absl::Status CatchUpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends one record and applies it to the cache. REQUIRES: flock(LOCK_EX) held and caught up.
  absl::Status AppendLocked(std::string bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Polls until all `keys` exist; when `value` is not null it receives the value of keys[0].
  absl::Status PollKeys(absl::string_view op, absl::Span<const std::string> keys,
                        absl::Duration timeout, std::string* value);

  const std::string path_;
  const FileStoreOptions options_;
  absl::Mutex mu_;  // Serializes this instance's threads (flock does not separate threads).
  UniqueFd fd_ ABSL_GUARDED_BY(mu_);
  uint64_t offset_ ABSL_GUARDED_BY(mu_) = 0;  // File bytes already replayed into cache_.
  KvTable cache_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ddp

#endif  // DDP_STORE_FILE_STORE_H_
