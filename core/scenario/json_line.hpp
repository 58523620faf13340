// One line of a JSON Lines file, parsed without allocating per value: a flat object whose
// values are integers, strings, booleans, null, or arrays of those (nested), the shape of a
// captured program's records (docs/capture-format.md). Strings and keys are views into the
// line (or into the parser's own storage when they had escapes), valid until the next parse.
//   JsonLine j;
//   if (std::string e = j.parse(R"({"k": "free", "buf": 3})"); !e.empty()) fail(e);
//   const JsonLine::Value* buf = j.find("buf");   // buf->type == Type::integer, buf->i == 3
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardcheck::core {

class JsonLine {
 public:
  enum class Type : uint8_t { null, boolean, integer, number, string, array, object };
  struct Value {
    Type type = Type::null;
    bool b = false;
    int64_t i = 0;       // integer
    double x = 0;        // integer or number: its value as a double
    std::string_view s;  // string
    uint32_t first = 0;  // array: its elements are element(v, 0 .. count-1)
    uint32_t count = 0;
  };

  // Parses `line` as one JSON object. Returns "" or what is wrong, with its column
  // ("column 14: expected ',' or '}'"). Integers past int64 and numbers with a fraction or
  // an exponent are kept as Type::number (with `x`), so a reader can refuse them as the wrong
  // type, or read them as doubles where a field is a fraction.
  std::string parse(std::string_view line);

  // The value of a top-level key, or nullptr.
  const Value* find(std::string_view key) const;
  const Value& element(const Value& array, uint32_t i) const { return values_[array.first + i]; }
  const std::vector<std::pair<std::string_view, uint32_t>>& fields() const { return fields_; }

  static std::string_view type_name(Type t);

 private:
  struct Cursor;
  uint32_t value(Cursor& c, int depth);
  std::string_view string(Cursor& c);
  static void escape(Cursor& c, std::string& out);
  static uint32_t hex4(Cursor& c);
  static void number(Cursor& c, Value& v);

  std::vector<Value> values_;
  std::vector<std::pair<std::string_view, uint32_t>> fields_;  // key -> index in values_
  std::vector<uint32_t> scratch_;                              // array elements being parsed
  std::deque<std::string> decoded_;                            // strings that had escapes
};

}  // namespace shardcheck::core
