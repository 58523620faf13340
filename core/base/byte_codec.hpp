// A flat little binary codec for handing results between processes of one launch (the same
// build on every side, so no versioning): fixed-width integers and floats, and lengths before
// sequences. Reading past the end throws.
//   ByteWriter w;  w.put<int32_t>(3);  w.put_floats(v);
//   ByteReader r(w.bytes());  int32_t n = r.get<int32_t>();  auto v = r.get_floats();
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace shardcheck::core {

class ByteWriter {
 public:
  template <class T>
  void put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const std::byte*>(&v);
    bytes_.insert(bytes_.end(), p, p + sizeof v);
  }
  template <class T>
  void put_vector(const std::vector<T>& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    put<uint64_t>(v.size());
    if (v.empty()) return;
    const auto* p = reinterpret_cast<const std::byte*>(v.data());
    bytes_.insert(bytes_.end(), p, p + v.size() * sizeof(T));
  }
  void put_string(const std::string& s) { put_vector(std::vector<char>(s.begin(), s.end())); }
  const std::vector<std::byte>& bytes() const { return bytes_; }

 private:
  std::vector<std::byte> bytes_;
};

class ByteReader {
 public:
  explicit ByteReader(std::span<const std::byte> bytes) : bytes_(bytes) {}
  template <class T>
  T get() {
    T v;
    std::memcpy(&v, take(sizeof v), sizeof v);
    return v;
  }
  template <class T>
  std::vector<T> get_vector() {
    const uint64_t n = get<uint64_t>();
    if (n > bytes_.size() / sizeof(T)) throw std::runtime_error("byte codec: a length past the end");
    std::vector<T> v(static_cast<size_t>(n));
    const std::byte* p = take(v.size() * sizeof(T));
    if (!v.empty()) std::memcpy(v.data(), p, v.size() * sizeof(T));  // never memcpy from or to null
    return v;
  }
  std::string get_string() {
    const std::vector<char> c = get_vector<char>();
    return {c.begin(), c.end()};
  }
  bool done() const { return at_ == bytes_.size(); }

 private:
  const std::byte* take(size_t n) {
    if (n > bytes_.size() - at_) throw std::runtime_error("byte codec: read past the end");
    const std::byte* p = bytes_.data() + at_;
    at_ += n;
    return p;
  }
  std::span<const std::byte> bytes_;
  size_t at_ = 0;
};

}  // namespace shardcheck::core
