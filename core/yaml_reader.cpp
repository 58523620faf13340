// YamlReader: typed access with positions.
#include "core/yaml_reader.hpp"

#include <fstream>
#include <sstream>

namespace shardcheck::core {

namespace {
std::string type_name(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null: return "nothing";
    case YAML::NodeType::Scalar: return "'" + n.Scalar() + "'";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a map";
    default: return "an undefined value";
  }
}
}  // namespace

YAML::Node YamlReader::load() {
  std::ifstream in(file_, std::ios::binary);
  if (!in) fail_at({file_, 1, 1}, "cannot open the file");
  std::stringstream ss;
  ss << in.rdbuf();
  return load_string(ss.str());
}

YAML::Node YamlReader::load_string(const std::string& text) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    fail_at({file_, e.mark.line + 1, e.mark.column + 1}, "not valid YAML: " + e.msg);
  }
  if (!root || root.IsNull()) fail_at({file_, 1, 1}, "the file is empty; a scenario is a YAML map with 'kind:' and 'name:'");
  if (!root.IsMap()) fail(root, "a scenario is a YAML map (with 'kind:', 'name:', ...), not " + type_name(root));
  return root;
}

SourceLoc YamlReader::loc(const YAML::Node& n) const {
  const YAML::Mark m = n.Mark();
  if (m.is_null()) return {file_, 1, 1};
  return {file_, m.line + 1, m.column + 1};
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

void YamlReader::keys(const YAML::Node& m, std::initializer_list<const char*> allowed, const char* what) const {
  for (auto it = m.begin(); it != m.end(); ++it) {
    if (!it->first.IsScalar()) fail(it->first, std::string("keys of ") + what + " are names");
    const std::string& k = it->first.Scalar();
    bool ok = false;
    std::string list;
    for (const char* a : allowed) {
      ok |= k == a;
      list += (list.empty() ? "" : ", ") + std::string(a);
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
  return n.Scalar();
}

int64_t YamlReader::integer(const YAML::Node& n, const char* what, int64_t lo, int64_t hi) const {
  if (!n.IsScalar()) fail(n, std::string(what) + " must be an integer, not " + type_name(n));
  int64_t v = 0;
  try {
    size_t used = 0;
    const std::string& s = n.Scalar();
    v = std::stoll(s, &used, 0);
    if (used != s.size()) throw std::invalid_argument(s);
  } catch (const std::exception&) {
    fail(n, std::string(what) + " must be an integer, not '" + n.Scalar() + "'");
  }
  if (v < lo || v > hi) {
    fail(n, std::string(what) + " is " + std::to_string(v) + "; it must be between " + std::to_string(lo) + " and " +
                std::to_string(hi));
  }
  return v;
}

double YamlReader::real(const YAML::Node& n, const char* what) const {
  if (!n.IsScalar()) fail(n, std::string(what) + " must be a number, not " + type_name(n));
  try {
    size_t used = 0;
    const double v = std::stod(n.Scalar(), &used);
    if (used != n.Scalar().size()) throw std::invalid_argument(n.Scalar());
    return v;
  } catch (const std::exception&) {
    fail(n, std::string(what) + " must be a number, not '" + n.Scalar() + "'");
  }
}

bool YamlReader::boolean(const YAML::Node& n, const char* what) const {
  if (n.IsScalar()) {
    const std::string& s = n.Scalar();
    if (s == "true") return true;
    if (s == "false") return false;
  }
  fail(n, std::string(what) + " must be true or false, not " + type_name(n));
}

std::vector<int64_t> YamlReader::integers(const YAML::Node& n, const char* what, int64_t lo, int64_t hi) const {
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
