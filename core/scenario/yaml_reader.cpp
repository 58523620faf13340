// YamlReader: typed access with positions.
#include "core/scenario/yaml_reader.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>

#include "core/base/text.hpp"

namespace shardcheck::core {

namespace {
std::string type_name(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null:
      return "nothing";
    case YAML::NodeType::Scalar:
      return "'" + n.Scalar() + "'";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a map";
    default:
      return "an undefined value";
  }
}

// Line and column (from 1, columns in bytes as yaml-cpp counts them) of byte `pos`.
SourceLoc loc_of_byte(const std::string& file, const std::string& text, size_t pos) {
  SourceLoc at{file, 1, 1};
  size_t line_start = 0;
  for (size_t i = 0; i < pos; ++i) {
    if (text[i] != '\n') continue;
    ++at.line;
    line_start = i + 1;
  }
  at.column = static_cast<int>(pos - line_start) + 1;
  return at;
}

std::string file_kind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// The events of one parse, held to one document, unique keys and bounded nesting. yaml-cpp
// calls a node's event before its children's, so the check fails at the first offending mark.
class StructureCheck : public YAML::EventHandler {
 public:
  StructureCheck(const YamlReader& y, int max_depth) : y_(y), max_depth_(max_depth) {}

  void OnDocumentStart(const YAML::Mark& m) override {
    if (++documents_ > 1) {
      y_.fail_at(at(m),
                 "a second YAML document starts here; a scenario file holds one scenario (put each in a file "
                 "of its own)");
    }
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& m, YAML::anchor_t) override { node(m, nullptr); }
  // An alias of a scalar is that scalar as a key too: `&k a: 1` then `*k: 2` repeats 'a'.
  void OnAlias(const YAML::Mark& m, YAML::anchor_t anchor) override {
    const auto it = scalar_anchors_.find(anchor);
    node(m, it == scalar_anchors_.end() ? nullptr : &it->second);
  }
  void OnScalar(const YAML::Mark& m, const std::string&, YAML::anchor_t anchor,
                const std::string& value) override {
    if (anchor != YAML::NullAnchor) scalar_anchors_[anchor] = value;
    node(m, &value);
  }
  void OnSequenceStart(const YAML::Mark& m, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    node(m, nullptr);
    open(m, false);
  }
  void OnSequenceEnd() override { frames_.pop_back(); }
  void OnMapStart(const YAML::Mark& m, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    node(m, nullptr);
    open(m, true);
  }
  void OnMapEnd() override { frames_.pop_back(); }

 private:
  struct Frame {
    bool map = false;
    bool at_key = true;                      // a map's events alternate: key, value, key, ...
    std::map<std::string, YAML::Mark> keys;  // scalar keys seen, at their first mark
  };

  SourceLoc at(const YAML::Mark& m) const {
    if (m.is_null() || m.line < 0 || m.column < 0) return {y_.file(), 1, 1};
    return {y_.file(), m.line + 1, m.column + 1};
  }

  void node(const YAML::Mark& m, const std::string* scalar) {
    if (frames_.empty() || !frames_.back().map) return;
    Frame& f = frames_.back();
    const bool key = f.at_key;
    f.at_key = !f.at_key;
    if (!key || scalar == nullptr) return;
    const auto [first, fresh] = f.keys.emplace(*scalar, m);
    if (fresh) return;
    const SourceLoc was = at(first->second);
    y_.fail_at(at(m), "duplicate key '" + *scalar + "' (first at line " + std::to_string(was.line) +
                          ", column " + std::to_string(was.column) + "); a key may appear once in a map");
  }

  void open(const YAML::Mark& m, bool map) {
    if (static_cast<int>(frames_.size()) >= max_depth_) {
      y_.fail_at(at(m), "maps and lists nest more than " + std::to_string(max_depth_) +
                            " levels deep here; a scenario needs 6");
    }
    frames_.push_back({map, true, {}});
  }

  const YamlReader& y_;
  int max_depth_;
  int documents_ = 0;
  std::vector<Frame> frames_;
  std::map<YAML::anchor_t, std::string> scalar_anchors_;
};
}  // namespace

std::string YamlReader::error_text(const SourceLoc& at, const std::string& message) {
  return printable(at.str() + ": " + message);
}

YAML::Node YamlReader::load() { return load_string(read_file()); }

std::string YamlReader::read_file() const {
  const SourceLoc start{file_, 1, 1};
  // Non-blocking: opening a FIFO for reading would otherwise wait for a writer, forever.
  const Fd fd(::open(file_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (fd.get() < 0) fail_at(start, std::string("cannot open the file: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    fail_at(start, std::string("cannot read the file: ") + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) {  // no line to point at: the message names the folder and what to pass
    std::string dir = file_;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    throw LoadError(printable(dir + " is a directory; pass " + (dir == "/" ? "" : dir) + "/*.yaml"));
  }
  if (!S_ISREG(st.st_mode))
    fail_at(start, file_kind(st.st_mode) + ", not a regular file; a scenario is read from a file");
  // Read at most one chunk past the limit, never the whole of an oversized file.
  std::string text;
  char chunk[1 << 16];
  while (static_cast<int64_t>(text.size()) <= kMaxFileBytes) {
    const ssize_t n = ::read(fd.get(), chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail_at(start, std::string("cannot read the file: ") + std::strerror(errno));
    if (n == 0) break;
    text.append(chunk, static_cast<size_t>(n));
  }
  return text;
}

YAML::Node YamlReader::load_string(const std::string& text) {
  if (static_cast<int64_t>(text.size()) > kMaxFileBytes) {
    fail_at({file_, 1, 1}, "the file is larger than " + std::to_string(kMaxFileBytes) +
                               " bytes (1 MiB), the limit for scenario files");
  }
  check_characters(text);
  check_structure(text);
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    fail_at(exception_loc(e), "not valid YAML: " + e.msg);
  }
  if (!root || root.IsNull())
    fail_at({file_, 1, 1}, "the file is empty; a scenario is a YAML map with 'kind:' and 'name:'");
  if (!root.IsMap())
    fail(root, "a scenario is a YAML map (with 'kind:', 'name:', ...), not " + type_name(root));
  return root;
}

void YamlReader::check_characters(const std::string& text) const {
  for (size_t i = 0; i < text.size();) {
    const Utf8Sequence seq = utf8_sequence_at(text, i);
    const std::string here = text.substr(i, seq.length);
    if (!seq.valid) {
      fail_at(loc_of_byte(file_, text, i),
              "byte " + printable(here) + " is not UTF-8; a scenario file is UTF-8 text");
    }
    const char32_t c = seq.code_point;
    if (c == 0) fail_at(loc_of_byte(file_, text, i), "a NUL byte; a scenario file is text");
    // YAML's printable set: of the controls only tab, line feed, carriage return and NEL.
    if ((is_control(c) && c != '\t' && c != '\n' && c != '\r' && c != 0x85) || c == 0xFFFE || c == 0xFFFF) {
      fail_at(loc_of_byte(file_, text, i),
              "the control character " + printable(here) +
                  " is not allowed in a YAML file (only tab and line breaks are)");
    }
    i += seq.length;
  }
}

void YamlReader::check_structure(const std::string& text) const {
  std::istringstream in(text);
  StructureCheck check(*this, kMaxDepth);
  try {
    YAML::Parser parser(in);
    while (parser.HandleNextDocument(check)) {
    }
  } catch (const YAML::DeepRecursion& e) {
    fail_at(exception_loc(e), "maps and lists nest too deeply here; a scenario needs 6");
  } catch (const YAML::Exception& e) {
    fail_at(exception_loc(e), "not valid YAML: " + e.msg);
  }
}

SourceLoc YamlReader::loc(const YAML::Node& n) const {
  if (!n.IsDefined()) return {file_, 1, 1};  // a missing key's node has no mark (Mark() would throw)
  const YAML::Mark m = n.Mark();
  if (m.is_null() || m.line < 0 || m.column < 0) return {file_, 1, 1};
  return {file_, m.line + 1, m.column + 1};
}

SourceLoc YamlReader::exception_loc(const YAML::Exception& e) const {
  if (e.mark.is_null() || e.mark.line < 0 || e.mark.column < 0) return {file_, 1, 1};
  return {file_, e.mark.line + 1, e.mark.column + 1};
}

void YamlReader::fail(const YAML::Node& n, const std::string& message) const { fail_at(loc(n), message); }

void YamlReader::fail_at(const SourceLoc& at, const std::string& message) const {
  throw LoadError(error_text(at, message));
}

SourceLoc YamlReader::key_loc(const YAML::Node& map, const std::string& key) const {
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (it->first.IsScalar() && it->first.Scalar() == key) return loc(it->first);
  }
  return loc(map);
}

void YamlReader::keys(const YAML::Node& m, std::initializer_list<const char*> allowed,
                      const char* what) const {
  keys(m, std::vector<std::string>(allowed.begin(), allowed.end()), what);
}

void YamlReader::keys(const YAML::Node& m, const std::vector<std::string>& allowed, const char* what) const {
  for (auto it = m.begin(); it != m.end(); ++it) {
    if (!it->first.IsScalar()) fail(it->first, std::string("keys of ") + what + " are names");
    const std::string& k = it->first.Scalar();
    bool ok = false;
    std::string list;
    for (const std::string& a : allowed) {
      ok |= k == a;
      list += (list.empty() ? "" : ", ") + a;
    }
    if (!ok) fail(it->first, "unknown key '" + k + "' in " + what + " (expected one of: " + list + ")");
  }
}

void YamlReader::require(const YAML::Node& m, const char* key, const char* what) const {
  if (!m[key]) fail(m, std::string(what) + " needs '" + key + ":'");
}

YAML::Node YamlReader::map(const YAML::Node& n, const char* what) const {
  if (!n.IsMap()) fail(n, std::string(what) + " must be a map, not " + type_name(n));
  return n;
}

YAML::Node YamlReader::seq(const YAML::Node& n, const char* what) const {
  if (!n.IsSequence()) fail(n, std::string(what) + " must be a list, not " + type_name(n));
  return n;
}

std::string YamlReader::str(const YAML::Node& n, const char* what) const {
  if (!n.IsScalar()) fail(n, std::string(what) + " must be a name or string, not " + type_name(n));
  if (n.Scalar().size() > kMaxNameBytes) {
    fail(n, std::string(what) + " is " + std::to_string(n.Scalar().size()) +
                " bytes long; names are at most " + std::to_string(kMaxNameBytes) + " bytes");
  }
  check_scalar_text(n, what, false);
  return n.Scalar();
}

std::string YamlReader::text(const YAML::Node& n, const char* what) const {
  if (!n.IsScalar()) fail(n, std::string(what) + " must be text, not " + type_name(n));
  check_scalar_text(n, what, true);
  return n.Scalar();
}

void YamlReader::check_scalar_text(const YAML::Node& n, const char* what, bool line_breaks) const {
  const std::string& s = n.Scalar();
  for (size_t i = 0; i < s.size();) {
    const Utf8Sequence seq = utf8_sequence_at(s, i);
    const std::string here = s.substr(i, seq.length);
    if (!seq.valid)
      fail(n, std::string(what) + " is not UTF-8 text: byte " + printable(here) + " at byte " +
                  std::to_string(i + 1) + " of it");
    const bool allowed = line_breaks && (seq.code_point == '\n' || seq.code_point == '\t');
    if (is_control(seq.code_point) && !allowed) {
      fail(n,
           std::string(what) + " '" + s + "' holds the control character " + printable(here) + "; " +
               (line_breaks ? "text may hold tabs and line breaks, no other" : "names are printable text"));
    }
    i += seq.length;
  }
}

int64_t YamlReader::integer(const YAML::Node& n, const char* what, int64_t lo, int64_t hi) const {
  if (!n.IsScalar()) fail(n, std::string(what) + " must be an integer, not " + type_name(n));
  int64_t v = 0;
  try {
    const std::string& s = n.Scalar();
    const size_t digits = s.find_first_not_of("+-");
    const bool hex = digits != std::string::npos && s.compare(digits, 2, "0x") == 0;
    // No leading space: std::stoll would skip it, YAML does not write it.
    if (s.empty() || s.front() == ' ' || s.front() == '\t') throw std::invalid_argument(s);
    size_t used = 0;
    v = std::stoll(s, &used, hex ? 16 : 10);
    if (used != s.size()) throw std::invalid_argument(s);
  } catch (const std::exception&) {
    fail(n, std::string(what) + " must be an integer, not '" + n.Scalar() + "'");
  }
  if (v < lo || v > hi) {
    fail(n, std::string(what) + " is " + std::to_string(v) + "; it must be between " + std::to_string(lo) +
                " and " + std::to_string(hi));
  }
  return v;
}

double YamlReader::real(const YAML::Node& n, const char* what) const {
  if (!n.IsScalar()) fail(n, std::string(what) + " must be a number, not " + type_name(n));
  // strtod rather than stod: stod throws out_of_range on every subnormal result, so a valid
  // 1e-320 was "not a number".
  const std::string& s = n.Scalar();
  const char* begin = s.c_str();
  char* end = nullptr;
  errno = 0;
  const double v = s.empty() || s.front() == ' ' || s.front() == '\t' ? 0 : std::strtod(begin, &end);
  if (end != begin + s.size() || s.empty()) fail(n, std::string(what) + " must be a number, not '" + s + "'");
  if (!std::isfinite(v)) fail(n, std::string(what) + " must be a finite number, not '" + s + "'");
  if (errno == ERANGE && v == 0) {
    fail(n, std::string(what) + " is '" + s +
                "', too close to 0 for a double (it would read as 0); write 0 if that is meant");
  }
  return v;
}

bool YamlReader::boolean(const YAML::Node& n, const char* what) const {
  if (n.IsScalar()) {
    const std::string& s = n.Scalar();
    if (s == "true") return true;
    if (s == "false") return false;
  }
  fail(n, std::string(what) + " must be true or false, not " + type_name(n));
}

std::vector<int64_t> YamlReader::integers(const YAML::Node& n, const char* what, int64_t lo,
                                          int64_t hi) const {
  seq(n, what);
  std::vector<int64_t> v;
  for (const auto& x : n) v.push_back(integer(x, what, lo, hi));
  return v;
}

std::vector<std::string> YamlReader::strings(const YAML::Node& n, const char* what) const {
  seq(n, what);
  std::vector<std::string> v;
  for (const auto& x : n) v.push_back(str(x, what));
  return v;
}

}  // namespace shardcheck::core
