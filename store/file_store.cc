#include "store/file_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "store/file_store_log.h"
#include "base/check.h"

namespace ddp {
namespace {

absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  return absl::UnavailableError(
      absl::StrCat("file store ", path, ": ", what, ": ", std::strerror(errno)));
}

// Reads exactly `n` bytes at `offset`.
absl::Status PreadAll(int fd, uint64_t offset, size_t n, std::string* out, const std::string& path) {
  out->resize(n);
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd, out->data() + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ErrnoError("read", path);
    if (r == 0) return absl::DataLossError(absl::StrCat("file store ", path, ": file shrank"));
    done += static_cast<size_t>(r);
  }
  return absl::OkStatus();
}

}  // namespace

// flock() held for one operation; released in the destructor.
class FileStore::ScopedFileLock {
 public:
  explicit ScopedFileLock(int fd) : fd_(fd) {}
  ~ScopedFileLock() {
    if (locked_) ::flock(fd_, LOCK_UN);
  }
  absl::Status Lock(int op, const std::string& path) {
    while (::flock(fd_, op) != 0) {
      if (errno != EINTR) return ErrnoError("flock", path);
    }
    locked_ = true;
    return absl::OkStatus();
  }

 private:
  const int fd_;
  bool locked_ = false;
};

FileStore::FileStore(std::string path, UniqueFd fd, FileStoreOptions options)
    : path_(std::move(path)), options_(options), fd_(std::move(fd)) {}

absl::StatusOr<std::string> FileStore::PathFromUrl(absl::string_view url) {
  constexpr absl::string_view kScheme = "file://";
  if (!absl::StartsWith(url, kScheme) || url.size() <= kScheme.size() + 1 ||
      url[kScheme.size()] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("expected a file store URL of the form file:///absolute/path, got '", url, "'"));
  }
  return std::string(url.substr(kScheme.size()));
}

absl::StatusOr<std::unique_ptr<FileStore>> FileStore::Create(const std::string& path,
                                                             FileStoreOptions options) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
  if (!fd.valid()) return ErrnoError("open", path);
  std::unique_ptr<FileStore> store(new FileStore(path, std::move(fd), options));
  absl::MutexLock lock(&store->mu_);
  ScopedFileLock file_lock(store->fd_.get());
  // Exclusive: the first process to arrive writes the header.
  DDP_RETURN_IF_ERROR(store->LockAndCatchUp(LOCK_EX, &file_lock));
  if (store->offset_ == 0) DDP_RETURN_IF_ERROR(store->AppendLocked(std::string(kFileStoreHeader)));
  return store;
}

absl::Status FileStore::LockAndCatchUp(int lock_op, ScopedFileLock* lock) {
  DDP_RETURN_IF_ERROR(lock->Lock(lock_op, path_));
  return CatchUpLocked();
}

absl::Status FileStore::CatchUpLocked() {
  struct stat st;
  if (::fstat(fd_.get(), &st) != 0) return ErrnoError("fstat", path_);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < offset_) {
    return absl::DataLossError(absl::StrCat("file store ", path_, ": file shrank from ", offset_,
                                            " to ", size, " bytes (truncated or replaced?)"));
  }
  if (size == offset_) return absl::OkStatus();
  std::string data;
  DDP_RETURN_IF_ERROR(PreadAll(fd_.get(), offset_, size - offset_, &data, path_));
  absl::string_view records = data;
  if (offset_ == 0) {
    if (!absl::StartsWith(records, kFileStoreHeader)) {
      return absl::FailedPreconditionError(
          absl::StrCat("file store ", path_, ": not a file store (bad header)"));
    }
    records.remove_prefix(kFileStoreHeader.size());
  }
  const uint64_t records_offset = offset_ == 0 ? kFileStoreHeader.size() : offset_;
  absl::Status status =
      ApplyFileRecords(records, records_offset, options_.max_value_bytes, &cache_);
  if (!status.ok()) return absl::DataLossError(absl::StrCat(path_, ": ", status.message()));
  offset_ = size;
  return absl::OkStatus();
}

absl::Status FileStore::AppendLocked(std::string bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t w = ::write(fd_.get(), bytes.data() + done, bytes.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return ErrnoError("write", path_);
    done += static_cast<size_t>(w);
  }
  if (offset_ == 0) {
    offset_ = bytes.size();
    return absl::OkStatus();
  }
  DDP_RETURN_IF_ERROR(ApplyFileRecords(bytes, offset_, options_.max_value_bytes, &cache_));
  offset_ += bytes.size();
  return absl::OkStatus();
}

absl::Status FileStore::Set(absl::string_view key, absl::string_view value) {
  if (key.size() > options_.max_value_bytes || value.size() > options_.max_value_bytes) {
    return absl::InvalidArgumentError("file store Set: key or value above max_value_bytes");
  }
  absl::MutexLock lock(&mu_);
  ScopedFileLock file_lock(fd_.get());
  DDP_RETURN_IF_ERROR(LockAndCatchUp(LOCK_EX, &file_lock));
  return AppendLocked(EncodeFileRecord(FileRecordKind::kSet, key, value));
}

absl::StatusOr<int64_t> FileStore::Add(absl::string_view key, int64_t delta) {
  absl::MutexLock lock(&mu_);
  ScopedFileLock file_lock(fd_.get());
  DDP_RETURN_IF_ERROR(LockAndCatchUp(LOCK_EX, &file_lock));
  DDP_ASSIGN_OR_RETURN(int64_t sum, AddToStoredInteger(key, cache_.Find(key), delta));
  DDP_RETURN_IF_ERROR(
      AppendLocked(EncodeFileRecord(FileRecordKind::kSet, key, absl::StrCat(sum))));
  return sum;
}

absl::StatusOr<std::string> FileStore::CompareSet(absl::string_view key,
                                                  absl::string_view expected,
                                                  absl::string_view desired) {
  absl::MutexLock lock(&mu_);
  ScopedFileLock file_lock(fd_.get());
  DDP_RETURN_IF_ERROR(LockAndCatchUp(LOCK_EX, &file_lock));
  const std::string* current = cache_.Find(key);
  if ((current == nullptr && expected.empty()) || (current != nullptr && *current == expected)) {
    DDP_RETURN_IF_ERROR(AppendLocked(EncodeFileRecord(FileRecordKind::kSet, key, desired)));
    return std::string(desired);
  }
  return current == nullptr ? std::string(expected) : *current;
}

absl::StatusOr<bool> FileStore::DeleteKey(absl::string_view key) {
  absl::MutexLock lock(&mu_);
  ScopedFileLock file_lock(fd_.get());
  DDP_RETURN_IF_ERROR(LockAndCatchUp(LOCK_EX, &file_lock));
  if (cache_.Find(key) == nullptr) return false;
  DDP_RETURN_IF_ERROR(AppendLocked(EncodeFileRecord(FileRecordKind::kDelete, key, "")));
  return true;
}

absl::Status FileStore::PollKeys(absl::string_view op, absl::Span<const std::string> keys,
                                 absl::Duration timeout, std::string* value) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Duration backoff = absl::Milliseconds(1);
  while (true) {
    std::vector<std::string> missing;
    {
      absl::MutexLock lock(&mu_);
      ScopedFileLock file_lock(fd_.get());
      DDP_RETURN_IF_ERROR(LockAndCatchUp(LOCK_SH, &file_lock));
      missing = cache_.Missing(keys);
      if (missing.empty()) {
        if (value != nullptr) *value = *cache_.Find(keys[0]);
        return absl::OkStatus();
      }
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) return StoreTimeoutError(op, missing, timeout);
    absl::SleepFor(std::min(backoff, deadline - now));
    backoff = std::min(backoff * 2, options_.max_poll_interval);
  }
}

absl::StatusOr<std::string> FileStore::Get(absl::string_view key, absl::Duration timeout) {
  const std::string keys[] = {std::string(key)};
  std::string value;
  DDP_RETURN_IF_ERROR(PollKeys("Get", keys, timeout, &value));
  return value;
}

absl::Status FileStore::Wait(absl::Span<const std::string> keys, absl::Duration timeout) {
  return PollKeys("Wait", keys, timeout, nullptr);
}

absl::StatusOr<int64_t> FileStore::NumKeys() {
  absl::MutexLock lock(&mu_);
  ScopedFileLock file_lock(fd_.get());
  DDP_RETURN_IF_ERROR(LockAndCatchUp(LOCK_SH, &file_lock));
  return cache_.size();
}

}  // namespace ddp
