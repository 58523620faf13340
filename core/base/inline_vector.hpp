// A vector of trivially copyable values that keeps its first N in the object itself and goes
// to the heap only past them: the simulator's per-access records (a shadow cell's reads, a
// clock's chunk pointers, a lifetime's accesses) almost always hold one to four, and a heap
// block for each of them cost a malloc per operation and a cache miss wherever it landed.
//   InlineVector<AccessRec, 2> reads;  reads.push_back(r);  for (const AccessRec& x : reads) ...
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>

namespace shardcheck::core {

template <class T, size_t N>
class InlineVector {
  static_assert(std::is_trivially_copyable_v<T>, "values are moved with memcpy");
  static_assert(N > 0, "at least one value inline");

 public:
  using value_type = T;
  using iterator = T*;
  using const_iterator = const T*;

  InlineVector() = default;
  InlineVector(size_t n, const T& v) { assign(n, v); }
  InlineVector(const InlineVector& o) { copy_from(o); }
  InlineVector(InlineVector&& o) noexcept { take(o); }
  InlineVector& operator=(const InlineVector& o) {
    if (this != &o) {
      size_ = 0;
      copy_from(o);
    }
    return *this;
  }
  InlineVector& operator=(InlineVector&& o) noexcept {
    if (this != &o) {
      release();
      take(o);
    }
    return *this;
  }
  ~InlineVector() { release(); }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t capacity() const { return capacity_; }
  bool on_heap() const { return data_ != local(); }
  T* data() { return data_; }
  const T* data() const { return data_; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T& back() { return data_[size_ - 1]; }
  const T& back() const { return data_[size_ - 1]; }

  void reserve(size_t n) {
    if (n > capacity_) grow(n);
  }
  void push_back(const T& v) {
    if (size_ == capacity_) {
      const T copy = v;  // v may live in this vector
      grow(2 * capacity_);
      data_[size_++] = copy;
      return;
    }
    data_[size_++] = v;
  }
  template <class... A>
  T& emplace_back(A&&... a) {
    push_back(T{std::forward<A>(a)...});
    return back();
  }
  void pop_back() { --size_; }
  void clear() { size_ = 0; }
  // New values (past the old size) are `v`; a smaller size drops the tail.
  void resize(size_t n, const T& v = T{}) {
    if (n > capacity_) {
      const T copy = v;
      grow(std::max(n, size_t{2} * capacity_));
      std::fill(data_ + size_, data_ + n, copy);
    } else if (n > size_) {
      std::fill(data_ + size_, data_ + n, v);
    }
    size_ = static_cast<uint32_t>(n);
  }
  void assign(size_t n, const T& v) {
    const T copy = v;
    size_ = 0;
    resize(n, copy);
  }

  friend bool operator==(const InlineVector& a, const InlineVector& b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }

 private:
  T* local() { return std::launder(reinterpret_cast<T*>(inline_)); }
  const T* local() const { return std::launder(reinterpret_cast<const T*>(inline_)); }
  void grow(size_t n) {
    T* heap = static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{alignof(T)}));
    if (size_ > 0) std::memcpy(static_cast<void*>(heap), data_, size_ * sizeof(T));
    release();
    data_ = heap;
    capacity_ = static_cast<uint32_t>(n);
  }
  void release() {
    if (on_heap()) ::operator delete (data_, std::align_val_t{alignof(T)});
    data_ = local();
    capacity_ = N;
  }
  void copy_from(const InlineVector& o) {  // this is empty
    reserve(o.size_);
    if (o.size_ > 0) std::memcpy(static_cast<void*>(data_), o.data_, o.size_ * sizeof(T));
    size_ = o.size_;
  }
  void take(InlineVector& o) {  // this holds nothing on the heap
    if (o.on_heap()) {
      data_ = o.data_;
      capacity_ = o.capacity_;
      size_ = o.size_;
      o.data_ = o.local();
      o.capacity_ = N;
    } else {
      data_ = local();
      capacity_ = N;
      if (o.size_ > 0) std::memcpy(static_cast<void*>(data_), o.data_, o.size_ * sizeof(T));
      size_ = o.size_;
    }
    o.size_ = 0;
  }

  T* data_ = local();
  uint32_t size_ = 0;
  uint32_t capacity_ = N;
  alignas(T) std::byte inline_[N * sizeof(T)];
};

}  // namespace shardcheck::core
