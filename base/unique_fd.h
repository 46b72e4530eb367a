// UniqueFd: sole ownership of a POSIX file descriptor (closed on destruction).
#ifndef DDP_BASE_UNIQUE_FD_H_
#define DDP_BASE_UNIQUE_FD_H_

#include <unistd.h>

#include <utility>

namespace ddp {

// Owns one file descriptor; move-only. A default-constructed UniqueFd holds nothing (-1).
// Not thread-safe (like any value type).
class UniqueFd {
 public:
  UniqueFd() = default;
  // Takes ownership of `fd` (may be -1).
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) Reset(std::exchange(other.fd_, -1));
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { Reset(); }

  // The descriptor, still owned by this object (-1 when empty).
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Closes the held descriptor (if any) and takes ownership of `fd`.
  void Reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }
  // Gives up ownership without closing.
  int Release() { return std::exchange(fd_, -1); }

 private:
  int fd_ = -1;
};

}  // namespace ddp

#endif  // DDP_BASE_UNIQUE_FD_H_
