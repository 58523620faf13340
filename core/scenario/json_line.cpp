// A small JSON reader for one flat object per line (RFC 8259, with the limits of json_line.hpp).
#include "core/scenario/json_line.hpp"

#include <charconv>
#include <stdexcept>

#include "core/base/text.hpp"

namespace shardcheck::core {

namespace {
constexpr int kMaxDepth = 16;

struct ParseError {
  size_t at;
  std::string what;
};

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}
}  // namespace

struct JsonLine::Cursor {
  std::string_view s;
  size_t i = 0;
  [[noreturn]] void fail(const std::string& what) const { throw ParseError{i, what}; }
  void ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n')) ++i;
  }
  char peek() const { return i < s.size() ? s[i] : '\0'; }
  bool eat(char c) {
    ws();
    if (peek() != c) return false;
    ++i;
    return true;
  }
  void expect(char c, const char* what) {
    if (!eat(c)) fail(std::string("expected ") + what);
  }
};

std::string_view JsonLine::type_name(Type t) {
  switch (t) {
    case Type::null:
      return "null";
    case Type::boolean:
      return "a boolean";
    case Type::integer:
      return "an integer";
    case Type::number:
      return "a number that is not an int64 integer";
    case Type::string:
      return "a string";
    case Type::array:
      return "an array";
    case Type::object:
      return "an object";
  }
  return "?";
}

std::string_view JsonLine::string(Cursor& c) {
  c.expect('"', "'\"'");
  const size_t start = c.i;
  unsigned char seen = 0;  // every byte or'ed: ASCII alone needs no UTF-8 check
  while (c.i < c.s.size() && c.s[c.i] != '"' && c.s[c.i] != '\\') {
    const auto byte = static_cast<unsigned char>(c.s[c.i]);
    if (byte < 0x20) c.fail("a control character inside a string");
    seen |= byte;
    ++c.i;
  }
  if (c.i >= c.s.size()) c.fail("an unterminated string");
  if (c.s[c.i] == '"') {
    const std::string_view out = c.s.substr(start, c.i - start);
    ++c.i;
    if ((seen & 0x80) != 0 && !is_valid_utf8(out)) c.fail("a string that is not UTF-8");
    return out;
  }
  std::string& out = decoded_.emplace_back(c.s.substr(start, c.i - start));
  while (true) {
    if (c.i >= c.s.size()) c.fail("an unterminated string");
    const char ch = c.s[c.i++];
    if (ch == '"') break;
    if (static_cast<unsigned char>(ch) < 0x20) c.fail("a control character inside a string");
    if (ch != '\\') {
      out += ch;
      continue;
    }
    escape(c, out);
  }
  if (!is_valid_utf8(out)) c.fail("a string that is not UTF-8");
  return out;
}

// The escape after a backslash inside a string, appended to out as UTF-8.
void JsonLine::escape(Cursor& c, std::string& out) {
  if (c.i >= c.s.size()) c.fail("an unterminated string");
  const char e = c.s[c.i++];
  switch (e) {
    case '"':
    case '\\':
    case '/':
      out += e;
      break;
    case 'b':
      out += '\b';
      break;
    case 'f':
      out += '\f';
      break;
    case 'n':
      out += '\n';
      break;
    case 'r':
      out += '\r';
      break;
    case 't':
      out += '\t';
      break;
    case 'u': {
      uint32_t cp = hex4(c);
      if (cp >= 0xd800 && cp < 0xdc00) {
        if (c.i + 2 > c.s.size() || c.s[c.i] != '\\' || c.s[c.i + 1] != 'u') c.fail("a lone surrogate");
        c.i += 2;
        const uint32_t lo = hex4(c);
        if (lo < 0xdc00 || lo >= 0xe000) c.fail("a lone surrogate");
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
      } else if (cp >= 0xdc00 && cp < 0xe000) {
        c.fail("a lone surrogate");
      }
      append_utf8(out, cp);
      break;
    }
    default:
      c.fail("a bad escape in a string");
  }
}

uint32_t JsonLine::hex4(Cursor& c) {
  if (c.i + 4 > c.s.size()) c.fail("a bad \\u escape");
  uint32_t v = 0;
  for (int k = 0; k < 4; ++k) {
    const char h = c.s[c.i++];
    v <<= 4;
    if (h >= '0' && h <= '9')
      v |= static_cast<uint32_t>(h - '0');
    else if (h >= 'a' && h <= 'f')
      v |= static_cast<uint32_t>(h - 'a' + 10);
    else if (h >= 'A' && h <= 'F')
      v |= static_cast<uint32_t>(h - 'A' + 10);
    else
      c.fail("a bad \\u escape");
  }
  return v;
}

// A number: an integer when it has no fraction or exponent and fits int64.
void JsonLine::number(Cursor& c, Value& v) {
  const size_t start = c.i;
  const bool neg = c.peek() == '-';
  if (neg) ++c.i;
  // The integer part, accumulated negatively (whose range is the larger one) as it is scanned.
  int64_t acc = 0;
  bool fits = true;
  if (c.peek() == '0') {
    ++c.i;
  } else if (c.peek() >= '1' && c.peek() <= '9') {
    while (c.peek() >= '0' && c.peek() <= '9') {
      const int d = c.s[c.i++] - '0';
      fits = fits && !__builtin_mul_overflow(acc, 10, &acc) && !__builtin_sub_overflow(acc, d, &acc);
    }
  } else {
    c.fail("a bad number");
  }
  bool integer = true;
  if (c.peek() == '.') {
    integer = false;
    ++c.i;
    if (!(c.peek() >= '0' && c.peek() <= '9')) c.fail("a bad number");
    while (c.peek() >= '0' && c.peek() <= '9') ++c.i;
  }
  if (c.peek() == 'e' || c.peek() == 'E') {
    integer = false;
    ++c.i;
    if (c.peek() == '+' || c.peek() == '-') ++c.i;
    if (!(c.peek() >= '0' && c.peek() <= '9')) c.fail("a bad number");
    while (c.peek() >= '0' && c.peek() <= '9') ++c.i;
  }
  if (integer && fits && (neg || acc != INT64_MIN)) {
    // Its value as a double too, for the fields that are fractions: the conversion rounds to
    // nearest as parsing the digits would, without parsing them again.
    v.type = Type::integer;
    v.i = neg ? acc : -acc;
    v.x = static_cast<double>(v.i);
    return;
  }
  v.type = Type::number;
  std::from_chars(c.s.data() + start, c.s.data() + c.i, v.x);
}

uint32_t JsonLine::value(Cursor& c, int depth) {
  if (depth > kMaxDepth) c.fail("values nested too deep");
  c.ws();
  Value v;
  const char ch = c.peek();
  if (ch == '"') {
    v.type = Type::string;
    v.s = string(c);
  } else if (ch == '[') {
    ++c.i;
    v.type = Type::array;
    const size_t mark = scratch_.size();
    if (!c.eat(']')) {
      do {
        scratch_.push_back(value(c, depth + 1));
      } while (c.eat(','));
      c.expect(']', "',' or ']'");
    }
    // The elements, placed side by side after everything they contain.
    v.first = static_cast<uint32_t>(values_.size());
    v.count = static_cast<uint32_t>(scratch_.size() - mark);
    for (size_t k = mark; k < scratch_.size(); ++k) values_.push_back(values_[scratch_[k]]);
    scratch_.resize(mark);
  } else if (ch == '{') {
    ++c.i;
    v.type = Type::object;  // kept as a whole: no record field is an object
    if (!c.eat('}')) {
      do {
        c.ws();
        string(c);
        c.expect(':', "':'");
        value(c, depth + 1);
      } while (c.eat(','));
      c.expect('}', "',' or '}'");
    }
  } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
    number(c, v);
  } else if (c.s.substr(c.i, 4) == "true") {
    c.i += 4;
    v.type = Type::boolean;
    v.b = true;
  } else if (c.s.substr(c.i, 5) == "false") {
    c.i += 5;
    v.type = Type::boolean;
  } else if (c.s.substr(c.i, 4) == "null") {
    c.i += 4;
  } else {
    c.fail(c.i >= c.s.size() ? "expected a value, found the end of the line" : "expected a JSON value");
  }
  values_.push_back(v);
  return static_cast<uint32_t>(values_.size() - 1);
}

std::string JsonLine::parse(std::string_view line) {
  values_.clear();
  fields_.clear();
  scratch_.clear();
  decoded_.clear();
  Cursor c{line, 0};
  try {
    c.ws();
    if (c.peek() != '{') c.fail("expected '{'");
    ++c.i;
    if (!c.eat('}')) {
      do {
        c.ws();
        if (c.peek() != '"') c.fail("expected a quoted key");
        const std::string_view key = string(c);
        c.expect(':', "':'");
        const uint32_t v = value(c, 1);
        if (find(key)) c.fail("the key '" + std::string(key) + "' appears twice");
        fields_.emplace_back(key, v);
      } while (c.eat(','));
      c.expect('}', "',' or '}'");
    }
    c.ws();
    if (c.i != line.size()) c.fail("expected the end of the line after the object");
  } catch (const ParseError& e) {
    return "not a JSON object: column " + std::to_string(e.at + 1) + ": " + e.what;
  }
  return "";
}

const JsonLine::Value* JsonLine::find(std::string_view key) const {
  // Most keys differ in length or first letter: those are told apart without a memcmp call.
  for (const auto& [k, v] : fields_) {
    if (k.size() == key.size() && (key.empty() || k[0] == key[0]) && k == key) return &values_[v];
  }
  return nullptr;
}

}  // namespace shardcheck::core
