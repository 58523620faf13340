// Text that comes from outside (scenario files, command lines) made safe to store, print and
// render: UTF-8 validation, replacement of what is not UTF-8, and escaping of control
// characters, so a byte in a file can neither break a writer nor drive a terminal.
//   utf8_valid_prefix("ab\xff") == 2;   to_valid_utf8("a\xff") == "a\uFFFD"
//   printable("ra\x1b[2Jnks") == "ra\\x1b[2Jnks";   printable("x\ny") == "x\\ny"
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace shardcheck::core {

// One UTF-8 sequence at s[i]: its length and code point when it is well formed (RFC 3629: no
// overlong form, no surrogate, nothing past U+10FFFF); otherwise `valid` is false and `length`
// is the maximal ill-formed subpart (Unicode 15, section 3.9), at least 1.
struct Utf8Sequence {
  bool valid = false;
  size_t length = 1;
  char32_t code_point = 0;
};
Utf8Sequence utf8_sequence_at(std::string_view s, size_t i);

// The length of the longest prefix of `s` that is well-formed UTF-8.
size_t utf8_valid_prefix(std::string_view s);
inline bool is_valid_utf8(std::string_view s) { return utf8_valid_prefix(s) == s.size(); }

// C0 controls (U+0000-U+001F), DEL and the C1 controls (U+0080-U+009F): code points a
// terminal may act on rather than show.
inline bool is_control(char32_t c) { return c < 0x20 || (c >= 0x7F && c <= 0x9F); }

// `s` with each ill-formed subpart replaced by U+FFFD; well-formed text is returned unchanged.
std::string to_valid_utf8(std::string_view s);

// `s` for a message: control characters written as \n, \r, \t, \0, \xNN (C0 and DEL) or
// \u0080-\u009F (C1), and bytes that are not UTF-8 as \xNN; everything else as it is.
std::string printable(std::string_view s);

// `s` as one word a POSIX shell reads back as `s`: as it is when it holds only characters no
// shell treats specially, else in single quotes (a quote inside written '\''). For the
// reproducer lines, so a printed command runs as printed.
std::string shell_word(std::string_view s);

// The members of a closed set as a message names them, read from its table so a new row is
// named too: "a, b or c" ("a" alone; "" for none).
std::string one_of(std::span<const std::string_view> words);

}  // namespace shardcheck::core
