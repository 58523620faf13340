// Reading scenario YAML with positions: every accessor checks the node's type and throws a
// LoadError carrying file:line:column, and `keys` rejects unknown keys at their own mark.
// Before yaml-cpp builds a node, the file is held to what a scenario is: a regular file of
// UTF-8 text without control characters, one YAML document, no key twice in a map, nesting
// at most kMaxDepth deep. Every message has its control characters escaped (error_text).
//   YamlReader y(path);
//   YAML::Node root = y.load();                       // parse errors carry positions too
//   y.keys(root, {"kind", "name", "ranks"});
//   int ranks = y.integer(root["ranks"], "ranks", 1, 256);
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/base/status.hpp"

namespace shardcheck::core {

struct SourceLoc {
  std::string file;
  int line = 1;
  int column = 1;
  std::string str() const { return file + ":" + std::to_string(line) + ":" + std::to_string(column); }
};

class LoadError : public std::runtime_error {
 public:
  explicit LoadError(const std::string& where_and_what) : std::runtime_error(where_and_what) {}
};

class YamlReader {
 public:
  // yaml-cpp keeps several hundred bytes per node, so a scenario file's size bounds the memory
  // of loading it (a 1 MiB file of one-character list items: about 400 MB). Names are short.
  static constexpr int64_t kMaxFileBytes = int64_t{1} << 20;
  static constexpr size_t kMaxNameBytes = 256;
  // Maps and lists inside each other: a scenario needs 6 levels (a kernel's read ranges).
  // yaml-cpp recurses once per level and stops itself only at 500, saying "bad file".
  static constexpr int kMaxDepth = 64;

  explicit YamlReader(std::string file) : file_(std::move(file)) {}

  // Parses the file (or `text` when given, for tests); throws LoadError on any failure,
  // including a file larger than kMaxFileBytes, or one that is not a regular file (a FIFO
  // would block the reader forever), with the reason the system gives for one it cannot open.
  YAML::Node load();
  YAML::Node load_string(const std::string& text);

  // How every error about a scenario file reads: "file:line:column: message", with control
  // characters and bytes that are not UTF-8 escaped (core/base/text.hpp, printable), so a
  // byte from the file cannot drive the terminal that shows the message.
  static std::string error_text(const SourceLoc& at, const std::string& message);

  SourceLoc loc(const YAML::Node& n) const;
  [[noreturn]] void fail(const YAML::Node& n, const std::string& message) const;
  [[noreturn]] void fail_at(const SourceLoc& at, const std::string& message) const;

  void keys(const YAML::Node& map, std::initializer_list<const char*> allowed, const char* what) const;
  void keys(const YAML::Node& map, const std::vector<std::string>& allowed, const char* what) const;
  void require(const YAML::Node& map, const char* key, const char* what) const;
  YAML::Node map(const YAML::Node& n, const char* what) const;
  YAML::Node seq(const YAML::Node& n, const char* what) const;
  // A name or short string: at most kMaxNameBytes of UTF-8 without control characters (names
  // reach terminals, reports and JSON traces; an escape in a double-quoted string is refused).
  std::string str(const YAML::Node& n, const char* what) const;
  // Free text (a description): bounded only by the file; UTF-8, and of the control
  // characters only tabs and line breaks.
  std::string text(const YAML::Node& n, const char* what) const;
  // Decimal, or hexadecimal with 0x; a leading zero does not make it octal.
  int64_t integer(const YAML::Node& n, const char* what, int64_t lo, int64_t hi) const;
  // A finite number; a subnormal one (1e-320) included, one that rounds to 0 (1e-400) not.
  double real(const YAML::Node& n, const char* what) const;
  bool boolean(const YAML::Node& n, const char* what) const;
  std::vector<int64_t> integers(const YAML::Node& n, const char* what, int64_t lo, int64_t hi) const;
  std::vector<std::string> strings(const YAML::Node& n, const char* what) const;
  const std::string& file() const { return file_; }

  // The mark of a key inside a map (for errors about the key itself).
  SourceLoc key_loc(const YAML::Node& map, const std::string& key) const;
  // The position of a yaml-cpp exception (its mark is null for some errors: then 1:1).
  SourceLoc exception_loc(const YAML::Exception& e) const;

  // Loads the file (or `text`, when given) and runs `parse(reader, root)` on it; every failure,
  // ours or yaml-cpp's, becomes an Error reading "file:line:column: message".
  //   return YamlReader::parse_file<TraceScenario>(path, std::nullopt, parse);
  template <class T, class Parse>
  static Expected<T> parse_file(const std::string& path, const std::optional<std::string>& text,
                                Parse parse) {
    YamlReader y(path);
    try {
      return parse(y, text ? y.load_string(*text) : y.load());
    } catch (const LoadError& e) {
      return Error(e.what());
    } catch (const YAML::Exception& e) {
      return Error(error_text(y.exception_loc(e), e.msg));
    }
  }

 private:
  std::string read_file() const;
  // Every byte of the file is UTF-8 and YAML allows every character (no NUL, no control
  // characters but tab and line breaks); else fails at the first one that is not.
  void check_characters(const std::string& text) const;
  // One document, no duplicate key in any map, at most kMaxDepth levels (yaml-cpp keeps the
  // first of two equal keys silently, and ignores every document after the first).
  void check_structure(const std::string& text) const;
  void check_scalar_text(const YAML::Node& n, const char* what, bool line_breaks) const;

  std::string file_;
};

}  // namespace shardcheck::core
