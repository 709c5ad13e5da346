// Schema checks before a run and the rewrite for valijson. See schema_check.hpp and prepare.hpp.
#include "schemas/schema_check.hpp"

#include <algorithm>
#include <fstream>
#include <map>
#include <unordered_map>
#include <utility>

#include "schemas/prepare.hpp"

namespace quarry::schemas {

using nlohmann::json;

namespace {

std::string escape_token(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '~') o += "~0";
    else if (c == '/') o += "~1";
    else o += c;
  }
  return o;
}

std::string shown(const std::string& ptr) { return ptr.empty() ? "(root)" : ptr; }

// Text checks on the way through the parser (SAX: no tree): depth and keys per object, with the
// pointer of the first excess. Syntax errors are left to the parse that follows.
class ShapeScan : public nlohmann::json_sax<json> {
 public:
  explicit ShapeScan(const SchemaLimits& l) : limits_(l) {}
  std::string error, pointer;

  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool start_object(std::size_t) override { return open(false); }
  bool start_array(std::size_t) override { return open(true); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool key(string_t& k) override {
    Frame& f = frames_.back();
    f.key = k;
    if (++f.keys > limits_.max_object_keys)
      return fail("an object with more than " + std::to_string(limits_.max_object_keys) + " keys", frames_.size() - 1);
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  struct Frame {
    bool array = false;
    std::size_t index = 0, keys = 0;
    std::string key;
  };
  const SchemaLimits& limits_;
  std::vector<Frame> frames_;
  std::size_t values_ = 0;

  bool value() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
    if (++values_ > limits_.max_values)
      return fail("more than " + std::to_string(limits_.max_values) + " JSON values", frames_.size());
    return true;
  }
  bool open(bool array) {
    if (frames_.size() >= limits_.max_depth)
      return fail("nested deeper than " + std::to_string(limits_.max_depth) + " levels of JSON", frames_.size());
    frames_.push_back(Frame{array, 0, 0, {}});
    return true;
  }
  bool close() {
    frames_.pop_back();
    return value();
  }
  // `why` at the location named by the first `levels` frames (each frame names its child).
  bool fail(const std::string& why, std::size_t levels) {
    error = why;
    for (std::size_t i = 0; i < levels && i < frames_.size(); ++i)
      pointer += "/" + (frames_[i].array ? std::to_string(frames_[i].index) : escape_token(frames_[i].key));
    return false;
  }
};

}  // namespace

json parse_schema_text(const std::string& text, const std::string& file, const SchemaLimits& limits) {
  if (text.size() > limits.max_bytes)
    throw InvalidSchema(file, "",
                        "schema of " + std::to_string(text.size()) + " bytes is larger than the limit of " +
                            std::to_string(limits.max_bytes));
  ShapeScan scan(limits);
  if (!json::sax_parse(text, &scan) && !scan.error.empty()) throw InvalidSchema(file, scan.pointer, scan.error);
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    throw InvalidSchema(file, "", std::string("malformed JSON: ") + e.what());
  }
}

json load_schema_file(const std::filesystem::path& path, const SchemaLimits& limits) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec && size > limits.max_bytes)
    throw InvalidSchema(path.string(), "",
                        "schema of " + std::to_string(size) + " bytes is larger than the limit of " +
                            std::to_string(limits.max_bytes));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InvalidSchema(path.string(), "", "cannot open the schema");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_schema_text(text, path.string(), limits);
}

namespace detail {

std::size_t json_depth(const json& root, std::size_t limit) {
  std::vector<std::pair<const json*, std::size_t>> stack{{&root, 1}};
  std::size_t deepest = 0;
  while (!stack.empty() && deepest <= limit) {
    const auto [v, d] = stack.back();
    stack.pop_back();
    deepest = std::max(deepest, d);
    if (v->is_structured())
      for (const auto& child : *v) stack.emplace_back(&child, d + 1);
  }
  return deepest;
}

namespace {

// The schema walk. JSON nodes on the way to schema locations form a "path tree" (each node's parent
// and the token from it), from which pointers are written only when needed: in the original
// document (errors) and in the rewritten one (targets), where the keys renamed at pattern sites
// differ.
class Preparer {
 public:
  Preparer(const json& schema, const std::string& file, const SchemaLimits& limits)
      : root_(schema), file_(file), limits_(limits) {}

  PreparedSchema run() {
    PreparedSchema out;
    out.document = root_;
    doc_ = &out.document;
    path_node(npos, &root_, doc_, "");
    location(0);
    index_ids();
    for (std::size_t k = 0; k < locs_.size(); ++k) walk(k, out);
    check_graph(out);
    // Member targets as pointers into the rewritten document.
    for (const auto& [path, index] : target_paths_) {
      if (out.targets.size() <= index) out.targets.resize(index + 1);
      out.targets[index] = rewritten_pointer(path);
    }
    edit(out);
    return out;
  }

 private:
  struct PathNode {
    std::size_t parent;  // npos for the root
    const json* orig;
    json* copy;  // the same node in the document copy (valid until the edits)
    std::string token;
    std::size_t depth;
  };
  struct Loc {
    std::size_t path;
    std::vector<std::size_t> in_place, parts;  // location indices
    std::vector<std::size_t> parse_order;      // the subschemas valijson parses here, in its order
    std::size_t pattern = npos, members = npos;
    std::string format;  // date / time / date-time, checked with RE2
    std::size_t ref_target = npos;  // path node of the $ref target
  };
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);

  const json& root_;
  const std::string& file_;
  const SchemaLimits& limits_;
  json* doc_ = nullptr;
  std::vector<PathNode> paths_;
  std::unordered_map<const json*, std::size_t> path_of_;
  std::vector<Loc> locs_;
  std::unordered_map<std::size_t, std::size_t> loc_of_path_;
  std::map<std::string, std::size_t> pattern_index_;
  std::vector<std::pair<std::size_t, std::size_t>> target_paths_;  // path node, target index
  std::unordered_map<const json*, bool> pattern_sites_;
  // Absolute "$id" / "id" (resolved against the enclosing base URI) -> pointer tokens and base.
  std::map<std::string, std::vector<std::string>> ids_;
  std::unordered_map<const json*, std::string> base_of_;  // base URI of each node holding an $id

  [[noreturn]] void fail(const std::string& ptr, const std::string& why) const { throw InvalidSchema(file_, ptr, why); }

  std::size_t path_node(std::size_t parent, const json* orig, json* copy, const std::string& token) {
    auto [it, fresh] = path_of_.emplace(orig, paths_.size());
    if (fresh) {
      const std::size_t depth = parent == npos ? 0 : paths_[parent].depth + 1;
      paths_.push_back({parent, orig, copy, token, depth});
    }
    return it->second;
  }
  // The child of path node `p` under `token` (an object key or an array index).
  std::size_t child(std::size_t p, const std::string& token) {
    const json* o = paths_[p].orig;
    json* c = paths_[p].copy;
    if (o->is_object()) return path_node(p, &o->at(token), &c->at(token), token);
    const std::size_t i = std::stoul(token);
    return path_node(p, &o->at(i), &c->at(i), token);
  }

  std::string pointer(std::size_t p) const {
    std::vector<const std::string*> tokens;
    for (; paths_[p].parent != npos; p = paths_[p].parent) tokens.push_back(&paths_[p].token);
    std::string out;
    for (auto it = tokens.rbegin(); it != tokens.rend(); ++it) out += "/" + escape_token(**it);
    return out;
  }
  // The pointer of the same node in the rewritten document (keys renamed at pattern sites).
  std::string rewritten_pointer(std::size_t p) const {
    std::vector<std::string> tokens;
    for (; paths_[p].parent != npos; p = paths_[p].parent) {
      std::string t = paths_[p].token;
      if (pattern_sites_.count(paths_[paths_[p].parent].orig)) {
        if (t == "patternProperties") t = kPatternPropertiesKey;
        else if (t == "additionalProperties") t = kAdditionalPropertiesKey;
      }
      tokens.push_back(std::move(t));
    }
    std::string out;
    for (auto it = tokens.rbegin(); it != tokens.rend(); ++it) out += "/" + escape_token(*it);
    return out;
  }

  // The location (schema to walk) at path node p.
  std::size_t location(std::size_t p) {
    auto [it, fresh] = loc_of_path_.emplace(p, locs_.size());
    if (fresh) {
      Loc l;
      l.path = p;
      locs_.push_back(std::move(l));
    }
    return it->second;
  }

  // The node's own "$id" (or draft-4 "id") when it changes the base URI: a string, and no $ref
  // beside it (in draft 7 a $ref's siblings are ignored, $id included).
  static const std::string* own_id(const json& s) {
    if (!s.is_object() || s.contains("$ref")) return nullptr;
    for (const char* k : {"$id", "id"})
      if (s.contains(k) && s[k].is_string()) return &s[k].get_ref<const std::string&>();
    return nullptr;
  }

  // Every "$id" in the document with its absolute form (RFC 3986 reference resolution against the
  // enclosing base), for references by URI and by plain-name fragment ("#foo").
  void index_ids() {
    struct Frame {
      const json* v;
      std::vector<std::string> tokens;
      std::string base;
    };
    std::vector<Frame> stack{{&root_, {}, ""}};
    while (!stack.empty()) {
      Frame f = std::move(stack.back());
      stack.pop_back();
      if (const std::string* id = own_id(*f.v)) {
        if (id->size() > limits_.max_id_bytes) continue;  // reported when walked
        f.base = resolve_uri(f.base, *id);
        std::string key = f.base;
        if (!key.empty() && key.back() == '#') key.pop_back();
        ids_.emplace(key, f.tokens);
        base_of_[f.v] = f.base;
      }
      if (f.v->is_object()) {
        for (auto it = f.v->begin(); it != f.v->end(); ++it) {
          if (it.key() == "enum" || it.key() == "const" || it.key() == "default" || it.key() == "examples") continue;
          if (!it.value().is_structured()) continue;
          Frame c{&it.value(), f.tokens, f.base};
          c.tokens.push_back(it.key());
          stack.push_back(std::move(c));
        }
      } else if (f.v->is_array()) {
        for (std::size_t i = 0; i < f.v->size(); ++i) {
          if (!(*f.v)[i].is_structured()) continue;
          Frame c{&(*f.v)[i], f.tokens, f.base};
          c.tokens.push_back(std::to_string(i));
          stack.push_back(std::move(c));
        }
      }
    }
    if (!ids_.count("")) ids_.emplace("", std::vector<std::string>{});  // the root without an $id
  }

  // The base URI in effect at path node p: the nearest $id above (or at) it.
  std::string base_at(std::size_t p) const {
    for (; p != npos; p = paths_[p].parent) {
      auto it = base_of_.find(paths_[p].orig);
      if (it != base_of_.end()) return it->second;
    }
    return "";
  }

  static bool has_scheme(const std::string& u) {
    const std::size_t colon = u.find(':');
    if (colon == std::string::npos || colon == 0 || !std::isalpha(static_cast<unsigned char>(u[0]))) return false;
    for (std::size_t i = 0; i < colon; ++i) {
      const char c = u[i];
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '-' && c != '.') return false;
    }
    return true;
  }

  // RFC 3986 section 5.2 reference resolution (dot segments removed from merged paths).
  static std::string resolve_uri(const std::string& base, const std::string& ref) {
    const std::string base_doc = base.substr(0, base.find('#'));
    if (ref.empty()) return base_doc;
    if (has_scheme(ref)) return ref;
    if (ref[0] == '#') return base_doc + ref;
    const std::size_t colon = has_scheme(base_doc) ? base_doc.find(':') : std::string::npos;
    const std::string scheme = colon == std::string::npos ? "" : base_doc.substr(0, colon + 1);
    std::string rest = colon == std::string::npos ? base_doc : base_doc.substr(colon + 1);
    std::string authority;
    if (rest.rfind("//", 0) == 0) {
      const std::size_t slash = rest.find('/', 2);
      authority = rest.substr(0, slash);
      rest = slash == std::string::npos ? "" : rest.substr(slash);
    }
    if (ref.rfind("//", 0) == 0) return scheme + ref;
    std::string path;
    if (ref[0] == '/') {
      path = ref;
    } else {
      const std::size_t last = rest.rfind('/');
      path = (last == std::string::npos ? (authority.empty() ? "" : "/") : rest.substr(0, last + 1)) + ref;
    }
    // Remove "." and ".." segments.
    std::string query_frag;
    if (const std::size_t q = path.find_first_of("?#"); q != std::string::npos) {
      query_frag = path.substr(q);
      path = path.substr(0, q);
    }
    std::vector<std::string> segs;
    std::size_t i = 0;
    const bool absolute = !path.empty() && path[0] == '/';
    while (i <= path.size()) {
      const std::size_t j = std::min(path.find('/', i), path.size());
      const std::string seg = path.substr(i, j - i);
      if (seg == "..") {
        if (!segs.empty()) segs.pop_back();
      } else if (seg != "." && !(seg.empty() && j < path.size())) {
        segs.push_back(seg);
      }
      i = j + 1;
    }
    std::string merged = absolute ? "/" : "";
    for (std::size_t k = 0; k < segs.size(); ++k) merged += (k ? "/" : "") + segs[k];
    return scheme + authority + merged + query_frag;
  }

  std::size_t follow(const std::vector<std::string>& tokens, const std::string& ref, const std::string& at) {
    std::size_t p = 0;
    for (const std::string& t : tokens) {
      const json& v = *paths_[p].orig;
      if (v.is_object() && v.contains(t)) {
        p = child(p, t);
      } else if (v.is_array() && !t.empty() && t.size() < 10 && std::all_of(t.begin(), t.end(), ::isdigit) &&
                 std::stoul(t) < v.size()) {
        p = child(p, t);
      } else {
        fail(at, "$ref '" + ref + "' does not resolve in this document");
      }
    }
    return p;
  }

  // The path node a $ref at path node `from` names: the reference resolved against the base URI
  // there, then a document of this file (an "$id" in it, or the root) and a fragment (a JSON pointer
  // or a plain name).
  std::size_t resolve(const std::string& ref, std::size_t from, const std::string& at) {
    if (ref.size() > limits_.max_id_bytes)
      fail(at, "$ref of " + std::to_string(ref.size()) + " bytes (the limit is " + std::to_string(limits_.max_id_bytes) + ")");
    const std::string abs = resolve_uri(base_at(from), ref);
    if (auto it = ids_.find(abs); it != ids_.end()) return follow(it->second, ref, at);  // "#name" of an $id
    const std::size_t hash = abs.find('#');
    const std::string doc = abs.substr(0, hash);
    const std::string fragment = hash == std::string::npos ? "" : abs.substr(hash + 1);
    auto it = ids_.find(doc);
    if (it == ids_.end())
      fail(at, "$ref '" + ref + "': only references inside this document are supported (" +
                   (doc.empty() ? std::string("no such $id") : "'" + doc + "' is not an $id of this document") +
                   "; remote documents are not fetched)");
    if (!fragment.empty() && fragment[0] != '/') fail(at, "$ref '" + ref + "': no $id of that name in this document");
    std::vector<std::string> tokens = it->second;
    std::size_t i = 0;
    while (i < fragment.size()) {
      const std::size_t j = fragment.find('/', i + 1);
      const std::string raw = fragment.substr(i + 1, j == std::string::npos ? std::string::npos : j - i - 1);
      std::string tok;
      for (std::size_t k = 0; k < raw.size(); ++k) {  // percent-decoding
        if (raw[k] == '%' && k + 2 < raw.size() && std::isxdigit(static_cast<unsigned char>(raw[k + 1])) &&
            std::isxdigit(static_cast<unsigned char>(raw[k + 2]))) {
          tok += static_cast<char>(std::stoi(raw.substr(k + 1, 2), nullptr, 16));
          k += 2;
        } else {
          tok += raw[k];
        }
      }
      std::string key;
      for (std::size_t k = 0; k < tok.size(); ++k) {
        if (tok[k] == '~' && k + 1 < tok.size() && (tok[k + 1] == '0' || tok[k + 1] == '1')) {
          key += tok[k + 1] == '0' ? '~' : '/';
          ++k;
        } else {
          key += tok[k];
        }
      }
      tokens.push_back(std::move(key));
      if (j == std::string::npos) break;
      i = j;
    }
    return follow(tokens, ref, at);
  }

  std::size_t compile_pattern(const json& v, const std::string& at) {
    if (!v.is_string()) fail(at, "a pattern must be a string");
    const std::string p = v.get<std::string>();
    auto it = pattern_index_.find(p);
    if (it != pattern_index_.end()) return it->second;
    std::shared_ptr<const Pattern> compiled;
    try {
      compiled = std::make_shared<const Pattern>(p);
    } catch (const PatternError& e) {
      std::string shown_p = p.size() > 80 ? p.substr(0, 77) + "..." : p;
      fail(at, "pattern /" + shown_p + "/ cannot be used: " + e.what());
    }
    const std::size_t index = patterns_.size();
    patterns_.push_back(std::move(compiled));
    pattern_index_.emplace(p, index);
    return index;
  }
  std::vector<std::shared_ptr<const Pattern>> patterns_;

  void walk(std::size_t k, PreparedSchema& out) {
    const std::size_t p = locs_[k].path;
    const json& s = *paths_[p].orig;
    const std::string ptr = pointer(p);
    if (s.is_boolean()) return;
    if (!s.is_object()) fail(ptr, "a schema must be an object or a boolean, not " + std::string(s.type_name()));
    for (const char* key : {"$id", "id"})
      if (s.contains(key) && s[key].is_string() && s[key].get_ref<const std::string&>().size() > limits_.max_id_bytes)
        fail(ptr + "/" + key, std::string(key) + " of more than " + std::to_string(limits_.max_id_bytes) + " bytes");
    auto sub = [&](std::size_t parent_path, const std::string& token) { return location(child(parent_path, token)); };
    if (s.contains("$ref")) {  // draft 7: the siblings of $ref are ignored
      if (!s["$ref"].is_string()) fail(ptr + "/$ref", "$ref must be a string");
      const std::size_t t = resolve(s["$ref"].get<std::string>(), p, ptr + "/$ref");
      locs_[k].ref_target = t;
      const std::size_t tl = location(t);
      locs_[k].in_place.push_back(tl);
      return;
    }
    const bool site = s.contains("patternProperties");
    auto each = [&](const char* kw, bool in_place, bool as_array, bool as_map) {
      if (!s.contains(kw)) return;
      const json& v = s[kw];
      const std::size_t kp = child(p, kw);
      // patternProperties and the additionalProperties beside it are parsed as member targets.
      const bool parsed = !(site && (std::string(kw) == "patternProperties" || std::string(kw) == "additionalProperties"));
      auto add = [&](std::size_t l) {
        (in_place ? locs_[k].in_place : locs_[k].parts).push_back(l);
        if (parsed) locs_[k].parse_order.push_back(l);
      };
      if (as_array && v.is_array()) {
        for (std::size_t i = 0; i < v.size(); ++i) add(sub(kp, std::to_string(i)));
      } else if (as_map) {
        if (!v.is_object()) fail(ptr + "/" + kw, std::string(kw) + " must be an object");
        for (auto it = v.begin(); it != v.end(); ++it) {
          if (std::string(kw) == "dependencies" && it.value().is_array()) continue;  // property dependencies
          add(sub(kp, it.key()));
        }
      } else if (!as_array || !v.is_array()) {
        add(location(kp));
      }
    };
    for (const char* kw : {"allOf", "anyOf", "oneOf"})
      if (s.contains(kw) && !s[kw].is_array()) fail(ptr + "/" + kw, std::string(kw) + " must be an array");
    // In the order valijson's SchemaParser::populateSchema parses them (see parse_depth).
    each("allOf", true, true, false);
    each("anyOf", true, true, false);
    each("contains", false, false, false);
    each("dependencies", true, false, true);
    each("items", false, true, false);
    each("additionalItems", false, false, false);
    for (const char* kw : {"if", "then", "else", "not"}) each(kw, true, false, false);
    each("oneOf", true, true, false);
    each("properties", false, false, true);
    each("patternProperties", false, false, true);
    each("additionalProperties", false, false, false);
    each("propertyNames", false, false, false);
    if (s.contains("pattern")) locs_[k].pattern = compile_pattern(s["pattern"], ptr + "/pattern");
    if (s.contains("format")) {
      if (!s["format"].is_string()) fail(ptr + "/format", "format must be a string");
      const std::string f = s["format"].get<std::string>();
      if (f == "date" || f == "time" || f == "date-time") locs_[k].format = f;
    }
    if (s.contains("patternProperties")) {
      pattern_sites_[&s] = true;
      MemberRule rule;
      if (s.contains("properties") && s["properties"].is_object())
        for (auto it = s["properties"].begin(); it != s["properties"].end(); ++it) rule.declared.insert(it.key());
      auto target_of = [&](std::size_t path) {
        const json& v = *paths_[path].orig;
        Target t;
        if (v.is_boolean()) {
          t.kind = v.get<bool>() ? Target::kAny : Target::kNone;
        } else {
          t.kind = Target::kSchema;
          t.index = target_paths_.size();
          target_paths_.emplace_back(path, t.index);
        }
        return t;
      };
      const std::size_t pp = child(p, "patternProperties");
      const json& pats = s["patternProperties"];
      for (auto it = pats.begin(); it != pats.end(); ++it) {
        const std::string at = ptr + "/patternProperties/" + escape_token(it.key());
        rule.patterns.emplace_back(compile_pattern(json(it.key()), at), target_of(child(pp, it.key())));
      }
      if (s.contains("additionalProperties")) rule.additional = target_of(child(p, "additionalProperties"));
      locs_[k].members = out.members.size();
      out.members.push_back(std::move(rule));
    }
  }

  // In-place cycles, in-place work and nesting levels (see schema_check.hpp).
  void check_graph(PreparedSchema& out) {
    const std::size_t n = locs_.size();
    // 1. In-place edges: depth-first search (iterative); a back edge is a cycle. At a node's finish:
    //    paths = 1 + the children's, depth = 1 + the deepest child's.
    std::vector<char> color(n, 0);
    std::vector<std::uint64_t> paths(n, 1);
    std::vector<std::size_t> depth(n, 1);
    std::vector<std::pair<std::size_t, std::size_t>> stack;
    for (std::size_t r = 0; r < n; ++r) {
      if (color[r]) continue;
      color[r] = 1;
      stack.push_back({r, 0});
      while (!stack.empty()) {
        const std::size_t v = stack.back().first;
        if (stack.back().second < locs_[v].in_place.size()) {
          const std::size_t w = locs_[v].in_place[stack.back().second++];
          if (color[w] == 1) {
            std::size_t from = 0;
            while (stack[from].first != w) ++from;
            std::string cycle;
            for (std::size_t i = from; i < stack.size(); ++i) cycle += shown(pointer(locs_[stack[i].first].path)) + " -> ";
            cycle += shown(pointer(locs_[w].path));
            fail(pointer(locs_[w].path), "$ref cycle that makes no progress: " + cycle +
                                             " (each step applies a schema to the same value; none descends into a part of it)");
          }
          if (color[w] == 0) {
            color[w] = 1;
            stack.push_back({w, 0});
          }
          continue;
        }
        std::uint64_t p = 1;
        std::size_t d = 1;
        for (std::size_t w : locs_[v].in_place) {
          p = std::min(p + paths[w], limits_.max_in_place_paths + 1);
          d = std::max(d, depth[w] + 1);
        }
        if (p > limits_.max_in_place_paths)
          fail(pointer(locs_[v].path), "the in-place applicators below (allOf, anyOf, oneOf, $ref, not, if) apply more than " +
                                           std::to_string(limits_.max_in_place_paths) + " schemas to one value");
        paths[v] = p;
        depth[v] = d;
        color[v] = 2;
        stack.pop_back();
      }
    }
    for (std::size_t v = 0; v < n; ++v) out.in_place_depth = std::max(out.in_place_depth, depth[v]);
    // 2. How deep valijson's parser will recurse, for the main document and for the member targets.
    std::vector<std::size_t> target_roots;
    for (const auto& [path, index] : target_paths_) target_roots.push_back(loc_of_path_.at(path));
    std::size_t deepest_at = 0;
    const std::size_t depth_main = parse_depth({0}, false, deepest_at);
    std::size_t deepest_target = 0;
    const std::size_t depth_targets = parse_depth(target_roots, true, deepest_target);
    out.levels = std::max(depth_main, depth_targets);
    if (depth_targets > depth_main) deepest_at = deepest_target;
    if (out.levels > limits_.max_levels)
      fail(pointer(locs_[deepest_at].path), "a chain of " + std::to_string(out.levels) +
                                                " nested schemas (subschemas and $refs) reaches here; the limit is " +
                                                std::to_string(limits_.max_levels));
  }

  // The deepest nesting of valijson's parse (SchemaParser::makeOrReuseSchema / populateSchema) from
  // `roots` (entered through a $ref when `via_ref`: the member targets), replayed without
  // recursion: a schema's subschemas in
  // the parser's keyword order; a $ref target is parsed once (memoised by its pointer, which the
  // rewrite makes canonical), each $ref hop a level of its own. Sets `at` to a location at the
  // deepest point.
  std::size_t parse_depth(const std::vector<std::size_t>& roots, bool via_ref, std::size_t& at) const {
    std::vector<char> cached(locs_.size(), 0);
    struct Frame {
      std::size_t loc, next, levels;  // levels: this frame's populate + the $ref hops before it
    };
    std::vector<Frame> stack;
    std::size_t depth = 0, deepest = 0;
    // Follows $ref hops from `l` and pushes the schema to populate, unless a hop is memoised.
    auto enter = [&](std::size_t l, bool through_ref) {
      std::size_t hops = 0;
      if (through_ref) {
        if (cached[l]) return;
        cached[l] = 1;
        ++hops;
      }
      while (locs_[l].ref_target != npos) {
        const std::size_t t = loc_of_path_.at(locs_[l].ref_target);
        if (cached[t]) {
          deepest = std::max(deepest, depth + hops + 1);
          return;
        }
        cached[t] = 1;
        ++hops;
        l = t;
      }
      stack.push_back({l, 0, hops + 1});
      depth += hops + 1;
      if (depth > deepest) {
        deepest = depth;
        at = l;
      }
    };
    for (std::size_t r : roots) {
      enter(r, via_ref);
      while (!stack.empty()) {
        Frame& f = stack.back();
        if (f.next < locs_[f.loc].parse_order.size()) {
          enter(locs_[f.loc].parse_order[f.next++], false);
          continue;
        }
        depth -= f.levels;
        stack.pop_back();
      }
    }
    return deepest;
  }

  // Applies the rewrite of prepare.hpp to the document copy, deepest locations first (a rename
  // moves a subtree, so what lies below it is edited before).
  void edit(PreparedSchema& out) {
    std::vector<std::size_t> order(locs_.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return paths_[locs_[a].path].depth > paths_[locs_[b].path].depth; });
    for (std::size_t k : order) {
      const Loc& l = locs_[k];
      json& s = *paths_[l.path].copy;
      if (!s.is_object()) continue;
      if (l.ref_target != npos) {
        // valijson percent-decodes pointer tokens: '%' (and '#') are encoded.
        std::string ref = "#";
        for (char c : rewritten_pointer(l.ref_target)) {
          if (c == '%') ref += "%25";
          else if (c == '#') ref += "%23";
          else ref += c;
        }
        s["$ref"] = ref;
        continue;
      }
      for (auto it = s.begin(); it != s.end();) {
        if (it.key().rfind(kInternalPrefix, 0) == 0) it = s.erase(it);
        else ++it;
      }
      s.erase("$id");
      s.erase("id");
      if (l.pattern != npos) {
        s.erase("pattern");
        s[kPatternKey] = l.pattern;
      }
      s.erase("format");
      if (!l.format.empty()) s[kFormatKey] = l.format;
      if (l.members != npos) {
        s[kPatternPropertiesKey] = std::move(s["patternProperties"]);
        s.erase("patternProperties");
        if (s.contains("additionalProperties")) {
          s[kAdditionalPropertiesKey] = std::move(s["additionalProperties"]);
          s.erase("additionalProperties");
        }
        s[kMembersKey] = l.members;
      }
    }
    out.patterns = std::move(patterns_);
  }
};

}  // namespace

void check_shape(const json& root, const std::string& file, const SchemaLimits& limits) {
  // Iterative: everything after (copies, valijson) recurses over the JSON. Frames of structured
  // values keep their parent and token, for the pointer of an excess.
  struct Frame {
    const json* v;
    std::size_t parent, depth;
    std::string token;
  };
  std::vector<Frame> frames{{&root, static_cast<std::size_t>(-1), 1, ""}};
  std::vector<std::size_t> todo{0};
  std::size_t values = 1;
  auto where = [&](std::size_t f) {
    std::vector<const std::string*> tokens;
    for (; frames[f].parent != static_cast<std::size_t>(-1); f = frames[f].parent) tokens.push_back(&frames[f].token);
    std::string out;
    for (auto it = tokens.rbegin(); it != tokens.rend(); ++it) out += "/" + escape_token(**it);
    return out;
  };
  while (!todo.empty()) {
    const std::size_t f = todo.back();
    todo.pop_back();
    const json& v = *frames[f].v;
    if (frames[f].depth > limits.max_depth)
      throw InvalidSchema(file, where(f), "nested deeper than " + std::to_string(limits.max_depth) + " levels of JSON");
    if (v.is_object() && v.size() > limits.max_object_keys)
      throw InvalidSchema(file, where(f), "an object with more than " + std::to_string(limits.max_object_keys) + " keys");
    values += v.is_structured() ? v.size() : 0;
    if (values > limits.max_values)
      throw InvalidSchema(file, where(f), "more than " + std::to_string(limits.max_values) + " JSON values");
    if (v.is_object()) {
      for (auto it = v.begin(); it != v.end(); ++it)
        if (it.value().is_structured()) {
          frames.push_back({&it.value(), f, frames[f].depth + 1, it.key()});
          todo.push_back(frames.size() - 1);
        }
    } else if (v.is_array()) {
      for (std::size_t i = 0; i < v.size(); ++i)
        if (v[i].is_structured()) {
          frames.push_back({&v[i], f, frames[f].depth + 1, std::to_string(i)});
          todo.push_back(frames.size() - 1);
        }
    }
  }
}

PreparedSchema prepare_schema(const json& schema, const std::string& file, const SchemaLimits& limits) {
  check_shape(schema, file, limits);
  return Preparer(schema, file, limits).run();
}

}  // namespace detail
}  // namespace quarry::schemas
