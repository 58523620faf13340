// UTF-8 decoding by the table of well-formed byte sequences (Unicode 15, Table 3-7).
#include "core/base/text.hpp"

#include <cstdio>

namespace shardcheck::core {

namespace {

struct ByteRange {
  unsigned char lo, hi;
};

// The ranges the second byte of a sequence may take, by its lead byte; later bytes are
// always 80..BF. Returns the sequence length (0 for a byte that cannot lead one).
size_t lead(unsigned char b, ByteRange& second) {
  second = {0x80, 0xBF};
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b == 0xE0) second = {0xA0, 0xBF};
  if (b == 0xED) second = {0x80, 0x9F};  // U+D800..U+DFFF are surrogates, not characters
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b == 0xF0) second = {0x90, 0xBF};
  if (b == 0xF4) second = {0x80, 0x8F};  // nothing past U+10FFFF
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;
}

void append_hex_escape(std::string& out, const char* format, unsigned value) {
  char buf[8];
  std::snprintf(buf, sizeof buf, format, value);
  out += buf;
}

}  // namespace

Utf8Sequence utf8_sequence_at(std::string_view s, size_t i) {
  Utf8Sequence seq;
  const auto b0 = static_cast<unsigned char>(s[i]);
  ByteRange next{};
  const size_t n = lead(b0, next);
  if (n == 0) return seq;
  char32_t cp = n == 1 ? b0 : b0 & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    if (i + k >= s.size()) {
      seq.length = k;
      return seq;
    }
    const auto b = static_cast<unsigned char>(s[i + k]);
    if (b < next.lo || b > next.hi) {
      seq.length = k;
      return seq;
    }
    cp = (cp << 6) | (b & 0x3F);
    next = {0x80, 0xBF};
  }
  seq.valid = true;
  seq.length = n;
  seq.code_point = cp;
  return seq;
}

size_t utf8_valid_prefix(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const Utf8Sequence seq = utf8_sequence_at(s, i);
    if (!seq.valid) return i;
    i += seq.length;
  }
  return i;
}

std::string to_valid_utf8(std::string_view s) {
  const size_t valid = utf8_valid_prefix(s);
  if (valid == s.size()) return std::string(s);
  std::string out(s.substr(0, valid));
  for (size_t i = valid; i < s.size();) {
    const Utf8Sequence seq = utf8_sequence_at(s, i);
    if (seq.valid) {
      out.append(s.substr(i, seq.length));
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER
    }
    i += seq.length;
  }
  return out;
}

namespace {

// Whether printable() writes the well-formed character `c` other than as it is.
bool escaped(char32_t c) { return is_control(c) || is_invisible_format(c); }

std::string escape(std::string_view s, bool keep_lines) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const Utf8Sequence seq = utf8_sequence_at(s, i);
    if (!seq.valid) {
      for (size_t k = 0; k < seq.length; ++k)
        append_hex_escape(out, "\\x%02x", static_cast<unsigned char>(s[i + k]));
    } else if (!escaped(seq.code_point) || (keep_lines && seq.code_point == '\n')) {
      out.append(s.substr(i, seq.length));
    } else if (seq.code_point == '\n') {
      out += "\\n";
    } else if (seq.code_point == '\r') {
      out += "\\r";
    } else if (seq.code_point == '\t') {
      out += "\\t";
    } else if (seq.code_point == 0) {
      out += "\\0";
    } else {
      append_hex_escape(out, seq.code_point < 0x80 ? "\\x%02x" : "\\u%04x",
                        static_cast<unsigned>(seq.code_point));
    }
    i += seq.length;
  }
  return out;
}

// Whether `s` holds a byte or character that printable() would escape.
bool needs_escape(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const Utf8Sequence seq = utf8_sequence_at(s, i);
    if (!seq.valid || escaped(seq.code_point)) return true;
    i += seq.length;
  }
  return false;
}

// $'...' with every byte of an escaped character, and ' and \\, written as escapes.
std::string ansi_c_quoted(std::string_view s) {
  std::string out = "$'";
  for (size_t i = 0; i < s.size();) {
    const Utf8Sequence seq = utf8_sequence_at(s, i);
    if (seq.valid && !escaped(seq.code_point)) {
      if (s[i] == '\'' || s[i] == '\\') out += '\\';
      out.append(s.substr(i, seq.length));
    } else {
      for (size_t k = 0; k < seq.length; ++k)
        append_hex_escape(out, "\\x%02x", static_cast<unsigned char>(s[i + k]));
    }
    i += seq.length;
  }
  return out + "'";
}

}  // namespace

std::string printable(std::string_view s) { return escape(s, false); }

std::string printable_lines(std::string_view s) { return escape(s, true); }

std::string shell_word(std::string_view s) {
  const bool plain = !s.empty() && s.find_first_not_of(
                                       "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                       "0123456789_./-+=:,@%") == std::string_view::npos;
  if (plain) return std::string(s);
  if (needs_escape(s)) return ansi_c_quoted(s);
  std::string out = "'";
  for (const char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string one_of(std::span<const std::string_view> words) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) {
    if (i > 0) out += i + 1 == words.size() ? " or " : ", ";
    out += words[i];
  }
  return out;
}

std::string shell_path(std::string_view path) {
  if (!path.empty() && path.front() == '-') return shell_word("./" + std::string(path));
  return shell_word(path);
}

}  // namespace shardcheck::core
