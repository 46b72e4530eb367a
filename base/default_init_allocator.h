// DefaultInitAllocator: a std::vector allocator under which resize() leaves new elements
// default-initialised (for bytes and floats: unwritten) instead of value-initialised (zeroed).
#ifndef DDP_BASE_DEFAULT_INIT_ALLOCATOR_H_
#define DDP_BASE_DEFAULT_INIT_ALLOCATOR_H_

#include <memory>
#include <new>
#include <type_traits>
#include <utility>

namespace ddp {

// For buffers that a kernel writes in full before anything reads them, where zeroing them first is a
// wasted pass over memory (a std::vector<uint8_t> of several MB zeroed on every resize). Construction
// with arguments is std::allocator's. Thread-safety as std::allocator's.
template <typename T, typename Base = std::allocator<T>>
class DefaultInitAllocator : public Base {
 public:
  template <typename U>
  struct rebind {
    using other = DefaultInitAllocator<U, typename std::allocator_traits<Base>::template rebind_alloc<U>>;
  };

  using Base::Base;

  // resize()'s and the sized constructor's elements: default-initialised.
  template <typename U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible<U>::value) {
    ::new (static_cast<void*>(p)) U;
  }
  // Every other construction: as Base does it.
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    std::allocator_traits<Base>::construct(static_cast<Base&>(*this), p, std::forward<Args>(args)...);
  }
};

}  // namespace ddp

#endif  // DDP_BASE_DEFAULT_INIT_ALLOCATOR_H_
