// Text that comes from outside (scenario files, command lines) made safe to store, print and
// render: UTF-8 validation, replacement of what is not UTF-8, and escaping of control
// characters, so a byte in a file can neither break a writer nor drive a terminal.
//   utf8_valid_prefix("ab\xff") == 2;   to_valid_utf8("a\xff") == "a\uFFFD"
//   printable("ra\x1b[2Jnks") == "ra\\x1b[2Jnks";   printable("x\ny") == "x\\ny"
//   shell_path("-rf") == "./-rf";   shell_word("a\x1b") == "$'a\\x1b'"
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

// Characters a terminal or a browser shows as nothing, yet which change how the text around
// them reads: the bidirectional embeddings, overrides and isolates (U+202A-U+202E,
// U+2066-U+2069) and marks (U+200E, U+200F, U+061C), and the zero-width characters (U+200B-U+200D,
// U+2060, U+FEFF). A name holding one can look like another name, or reorder a whole line.
inline bool is_invisible_format(char32_t c) {
  return (c >= 0x202A && c <= 0x202E) || (c >= 0x2066 && c <= 0x2069) || (c >= 0x200B && c <= 0x200F) ||
         c == 0x061C || c == 0x2060 || c == 0xFEFF;
}

// `s` with each ill-formed subpart replaced by U+FFFD; well-formed text is returned unchanged.
std::string to_valid_utf8(std::string_view s);

// `s` for a terminal, one line of it: control characters written as \n, \r, \t, \0, \xNN (C0
// and DEL) or \u0080-\u009F (C1), invisible format characters as \uNNNN (\u202e), and bytes
// that are not UTF-8 as \xNN; everything else as it is. Every name that comes from an input
// (a file or folder name, a scenario's name, a capture's strings) reaches the terminal
// through this, so none can move the cursor, retitle the window, forge a line or reorder one.
std::string printable(std::string_view s);
// printable for text of several lines that the checker composed itself (a finding's
// explanation): its line breaks kept, everything else as printable writes it.
std::string printable_lines(std::string_view s);

// `s` as one word a POSIX shell reads back as `s`: as it is when it holds only characters no
// shell treats specially, else in single quotes (a quote inside written '\''), or, when `s`
// holds anything printable() would escape, in ANSI-C quotes ($'a\x1bb': bash, zsh, ksh and
// POSIX.1-2024 sh) with those bytes as \xNN, so the word both shows safely and runs as printed.
// For the reproducer lines, so a printed command runs as printed.
std::string shell_word(std::string_view s);
// shell_word for a path argument: a path that begins with '-' is written ./-name, so that no
// command reads it as an option.
std::string shell_path(std::string_view path);

// The members of a closed set as a message names them, read from its table so a new row is
// named too: "a, b or c" ("a" alone; "" for none).
std::string one_of(std::span<const std::string_view> words);

}  // namespace shardcheck::core
