// UTF-8 validation, replacement and escaping of outside text: each accepts exactly the
// well-formed sequences of RFC 3629, so a byte that a JSON writer would throw on is caught
// here, and no control character reaches a terminal unescaped.
#include <catch2/catch.hpp>
#include <string>

#include "core/base/text.hpp"

using namespace shardcheck::core;

TEST_CASE("well-formed UTF-8 is accepted and every kind of ill-formed byte is found at its place",
          "[core][text]") {
  REQUIRE(is_valid_utf8(""));
  REQUIRE(is_valid_utf8("plain ascii"));
  REQUIRE(is_valid_utf8("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xF4\x8F\xBF\xBF"));  // é € 😀 U+10FFFF
  REQUIRE(utf8_valid_prefix("ab\xFF") == 2);                                             // never a UTF-8 byte
  REQUIRE(utf8_valid_prefix("ab\x80") == 2);              // a lone continuation byte
  REQUIRE(utf8_valid_prefix("ab\xC3") == 2);              // cut short at the end
  REQUIRE(utf8_valid_prefix("ab\xC0\xAF") == 2);          // overlong '/'
  REQUIRE(utf8_valid_prefix("ab\xE0\x80\xAF") == 2);      // overlong, three bytes
  REQUIRE(utf8_valid_prefix("ab\xED\xA0\x80") == 2);      // the surrogate U+D800
  REQUIRE(utf8_valid_prefix("ab\xF4\x90\x80\x80") == 2);  // past U+10FFFF
  REQUIRE(utf8_valid_prefix("ab\xF5\x80\x80\x80") == 2);
  REQUIRE(utf8_valid_prefix(std::string("a\0b", 3)) == 3);  // NUL is UTF-8; is_control catches it
}

TEST_CASE("ill-formed UTF-8 is replaced by U+FFFD once per maximal subpart, well-formed text is kept",
          "[core][text]") {
  const std::string fffd = "\xEF\xBF\xBD";
  REQUIRE(to_valid_utf8("caf\xC3\xA9") == "caf\xC3\xA9");
  REQUIRE(to_valid_utf8("k\xFFk") == "k" + fffd + "k");
  REQUIRE(to_valid_utf8("\xE2\x82") == fffd);  // one subpart: a truncated €
  REQUIRE(to_valid_utf8("\xE2\x82x") == fffd + "x");
  REQUIRE(to_valid_utf8("\xC0\xAF") == fffd + fffd);             // C0 leads nothing
  REQUIRE(to_valid_utf8("\xED\xA0\x80") == fffd + fffd + fffd);  // ED A0: the subpart is ED
  REQUIRE(is_valid_utf8(to_valid_utf8("\xF0\x9F\x98 \xFE\xFF \x80")));
}

TEST_CASE("printable escapes control characters and bytes that are not UTF-8, and nothing else",
          "[core][text]") {
  REQUIRE(printable("ra\x1B[2Jnks") == "ra\\x1b[2Jnks");
  REQUIRE(printable("a\nb\rc\td") == "a\\nb\\rc\\td");
  REQUIRE(printable(std::string("x\0y", 3)) == "x\\0y");
  REQUIRE(printable("del\x7F") == "del\\x7f");
  REQUIRE(printable("csi\xC2\x9B") == "csi\\u009b");  // C1 CSI: some terminals act on it as ESC [
  REQUIRE(printable("k\xFFk") == "k\\xffk");
  REQUIRE(printable("caf\xC3\xA9 \\ 'q'") == "caf\xC3\xA9 \\ 'q'");
  for (int c = 0; c < 0x20; ++c) {
    const std::string p = printable(std::string(1, static_cast<char>(c)));
    INFO(c);
    REQUIRE(p.size() >= 2);
    REQUIRE(p[0] == '\\');
  }
}

TEST_CASE("printable escapes bidi overrides and zero-width characters, which would reorder or hide a name",
          "[core][text]") {
  REQUIRE(printable("a\xE2\x80\xAE"
                    "b") == "a\\u202eb");                                  // RIGHT-TO-LEFT OVERRIDE
  REQUIRE(printable("\xE2\x81\xA6x\xE2\x81\xA9") == "\\u2066x\\u2069");    // isolates
  REQUIRE(printable("z\xE2\x80\x8Bw\xEF\xBB\xBF") == "z\\u200bw\\ufeff");  // zero-width, BOM
  REQUIRE(printable("\xE2\x80\x8C\xE2\x80\x8D") == "\\u200c\\u200d");
  REQUIRE(printable("\xE2\x80\x94") == "\xE2\x80\x94");  // an em dash is only a character
  REQUIRE(printable_lines("a\nb\x1b") == "a\nb\\x1b");
}

TEST_CASE("shell_word and shell_path give a word that shows safely and runs as printed", "[core][text]") {
  REQUIRE(shell_word("plain/path-1.yaml") == "plain/path-1.yaml");
  REQUIRE(shell_word("a b") == "'a b'");
  REQUIRE(shell_word("it's") == "'it'\\''s'");
  REQUIRE(shell_word("a\x1b[2J") == "$'a\\x1b[2J'");
  REQUIRE(shell_word("l1\nl2 'q' \\") == "$'l1\\x0al2 \\'q\\' \\\\'");
  REQUIRE(shell_word("r\xE2\x80\xAEl") == "$'r\\xe2\\x80\\xael'");
  REQUIRE(shell_path("-rf") == "./-rf");
  REQUIRE(shell_path("--help x") == "'./--help x'");
  REQUIRE(shell_path("/abs/-x") == "/abs/-x");
}
