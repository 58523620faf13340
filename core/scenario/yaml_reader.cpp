// YamlReader: typed access with positions.
#include "core/scenario/yaml_reader.hpp"

#include <cmath>
#include <fstream>

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
}  // namespace

YAML::Node YamlReader::load() {
  std::ifstream in(file_, std::ios::binary);
  if (!in) fail_at({file_, 1, 1}, "cannot open the file");
  // Read at most one chunk past the limit, never the whole of an oversized file (or a device).
  std::string text;
  char chunk[1 << 16];
  while (static_cast<int64_t>(text.size()) <= kMaxFileBytes && in.read(chunk, sizeof chunk).gcount() > 0) {
    text.append(chunk, static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) fail_at({file_, 1, 1}, "cannot read the file");
  return load_string(text);
}

YAML::Node YamlReader::load_string(const std::string& text) {
  if (static_cast<int64_t>(text.size()) > kMaxFileBytes) {
    fail_at({file_, 1, 1}, "the file is larger than " + std::to_string(kMaxFileBytes) +
                               " bytes (1 MiB), the limit for scenario files");
  }
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
  throw LoadError(at.str() + ": " + message);
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
  return n.Scalar();
}

std::string YamlReader::text(const YAML::Node& n, const char* what) const {
  if (!n.IsScalar()) fail(n, std::string(what) + " must be text, not " + type_name(n));
  return n.Scalar();
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
  double v = 0;
  try {
    size_t used = 0;
    v = std::stod(n.Scalar(), &used);
    if (used != n.Scalar().size()) throw std::invalid_argument(n.Scalar());
  } catch (const std::exception&) {
    fail(n, std::string(what) + " must be a number, not '" + n.Scalar() + "'");
  }
  if (!std::isfinite(v)) fail(n, std::string(what) + " must be a finite number, not '" + n.Scalar() + "'");
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
