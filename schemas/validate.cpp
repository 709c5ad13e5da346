#include "schemas/validate.hpp"

#include <pthread.h>

#include <exception>
#include <functional>
#include <stdexcept>
#include <utility>

#include <re2/re2.h>
#include <valijson/adapters/nlohmann_json_adapter.hpp>
#include <valijson/constraint_builder.hpp>
#include <valijson/constraints/concrete_constraints.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validation_results.hpp>
#include <valijson/validation_visitor.hpp>
#include <valijson/validator.hpp>

#include "schemas/prepare.hpp"
#include "schemas/schemas.hpp"

namespace quarry::schemas {

namespace detail {

// What the constraints below share: filled while the Validator is built, read-only afterwards.
struct Tables {
  std::vector<std::shared_ptr<const Pattern>> patterns;
  std::vector<MemberRule> members;
  std::vector<const valijson::Subschema*> targets;  // owned by Validator::targets_
  // RFC 3339 full-date, full-time (and both with T): the parts are checked after the match.
  RE2 date{R"((\d{4})-(\d{2})-(\d{2}))"};
  RE2 time{R"(([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d+)?([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d))"};
  RE2 date_time{R"((\d{4})-(\d{2})-(\d{2})[Tt]([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d+)?([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d))"};
};

}  // namespace detail

namespace {

using valijson::adapters::Adapter;
using valijson::adapters::NlohmannJsonAdapter;
using valijson::constraints::Constraint;
using valijson::constraints::PolyConstraint;

constexpr std::size_t kBigStack = 256u << 20;  // bytes
// Validation levels (see kMaxValidationLevels) that run on the caller's stack.
constexpr std::size_t kSmallStackLevels = 200;

// Runs `fn` on a thread with a stack of `bytes` and waits for it; rethrows what it throws.
void on_big_stack(std::size_t bytes, const std::function<void()>& fn) {
  struct Call {
    const std::function<void()>* fn;
    std::exception_ptr error;
  } call{&fn, nullptr};
  auto entry = [](void* arg) -> void* {
    auto* c = static_cast<Call*>(arg);
    try {
      (*c->fn)();
    } catch (...) {
      c->error = std::current_exception();
    }
    return nullptr;
  };
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, bytes);
  pthread_t thread;
  const int rc = pthread_create(&thread, &attr, entry, &call);
  pthread_attr_destroy(&attr);
  if (rc != 0) throw std::runtime_error("cannot start a thread for schema validation (error " + std::to_string(rc) + ")");
  pthread_join(thread, nullptr);
  if (call.error) std::rethrow_exception(call.error);
}

// `pattern`, on RE2.
class PatternConstraint final : public PolyConstraint {
 public:
  explicit PatternConstraint(std::shared_ptr<const Pattern> p) : p_(std::move(p)) {}
  bool validate(const Adapter& target, const std::vector<std::string>& context,
                valijson::ValidationResults* results) const override {
    if (!target.isString()) return true;
    if (p_->search(target.asString())) return true;
    if (results) results->pushError(context, "Failed to match regex specified by 'pattern' constraint.");
    return false;
  }

 private:
  Constraint* cloneInto(void* where) const override { return new (where) PatternConstraint(*this); }
  std::size_t sizeOf() const override { return sizeof(PatternConstraint); }
  std::shared_ptr<const Pattern> p_;
};

bool leap(int y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }
bool valid_day(int y, int m, int d) {
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (m < 1 || m > 12 || d < 1) return false;
  return d <= kDays[m - 1] + (m == 2 && leap(y) ? 1 : 0);
}

// `format`: date, time, date-time (RFC 3339 section 5.6), strings only.
class FormatConstraint final : public PolyConstraint {
 public:
  FormatConstraint(std::shared_ptr<const detail::Tables> t, std::string format) : t_(std::move(t)), format_(std::move(format)) {}
  bool validate(const Adapter& target, const std::vector<std::string>& context,
                valijson::ValidationResults* results) const override {
    if (!target.isString()) return true;
    const std::string s = target.asString();
    const re2::StringPiece text(s.data(), s.size());
    int y = 0, m = 0, d = 0;
    bool ok;
    if (format_ == "date") ok = RE2::FullMatch(text, t_->date, &y, &m, &d) && valid_day(y, m, d);
    else if (format_ == "time") ok = RE2::FullMatch(text, t_->time);
    else ok = RE2::FullMatch(text, t_->date_time, &y, &m, &d) && valid_day(y, m, d);
    if (!ok && results) results->pushError(context, "String should be a valid " + format_);
    return ok;
  }

 private:
  Constraint* cloneInto(void* where) const override { return new (where) FormatConstraint(*this); }
  std::size_t sizeOf() const override { return sizeof(FormatConstraint); }
  std::shared_ptr<const detail::Tables> t_;
  std::string format_;
};

// `patternProperties` with its sibling `additionalProperties` (schemas/prepare.hpp): every member
// against the schema of each pattern its name matches, and a member that neither `properties`
// names nor a pattern matches against `additionalProperties`; by valijson's own visitor.
class MembersConstraint final : public PolyConstraint {
 public:
  MembersConstraint(std::shared_ptr<const detail::Tables> t, std::size_t rule) : t_(std::move(t)), rule_(rule) {}
  bool validate(const Adapter& target, const std::vector<std::string>& context,
                valijson::ValidationResults* results) const override {
    const auto* object = dynamic_cast<const NlohmannJsonAdapter*>(&target);
    if (!object || !object->isObject()) return true;
    const detail::MemberRule& rule = t_->members[rule_];
    bool ok = true;
    for (const auto& member : object->asObject()) {
      const std::string& name = member.first;
      std::vector<std::string> inner = context;
      inner.push_back("[" + name + "]");
      bool matched = false;
      for (const auto& [pattern, target_schema] : rule.patterns) {
        const Pattern& p = *t_->patterns[pattern];
        if (!p.search(name)) continue;
        matched = true;
        if (check(member.second, target_schema, inner, results)) continue;
        if (!results) return false;
        results->pushError(context, "Failed to validate against schema associated with pattern '" + p.source() + "'.");
        ok = false;
      }
      if (matched || rule.declared.count(name)) continue;
      if (rule.additional.kind == detail::Target::kNone) {
        if (!results) return false;
        results->pushError(context,
                           "Object contains a property that could not be validated using 'properties' or "
                           "'additionalProperties' constraints: '" + name + "'.");
        ok = false;
      } else if (!check(member.second, rule.additional, inner, results)) {
        if (!results) return false;
        results->pushError(context, "Failed to validate against additional properties schema");
        ok = false;
      }
    }
    return ok;
  }

 private:
  bool check(const NlohmannJsonAdapter& value, const detail::Target& target, const std::vector<std::string>& context,
             valijson::ValidationResults* results) const {
    if (target.kind == detail::Target::kAny) return true;
    if (target.kind == detail::Target::kNone) return false;
    std::unordered_map<std::string, std::regex> unused;  // no std::regex constraint is left to use it
    valijson::ValidationVisitor<NlohmannJsonAdapter> v(value, context, true, results, unused);
    return v.validateSchema(*t_->targets[target.index]);
  }
  Constraint* cloneInto(void* where) const override { return new (where) MembersConstraint(*this); }
  std::size_t sizeOf() const override { return sizeof(MembersConstraint); }
  std::shared_ptr<const detail::Tables> t_;
  std::size_t rule_;
};

// Builders: valijson calls them for our keywords (the value is an index or a format name).
template <class Make>
class Builder final : public valijson::ConstraintBuilder {
 public:
  explicit Builder(Make make) : make_(std::move(make)) {}
  Constraint* make(const Adapter& value) const override { return make_(value); }

 private:
  Make make_;
};
template <class Make>
Builder<Make>* builder(Make make) {
  return new Builder<Make>(std::move(make));
}

std::size_t index_of(const Adapter& v) {
  int64_t i = 0;
  if (!v.getInteger(i) || i < 0) throw std::runtime_error("internal keyword with a bad index");
  return static_cast<std::size_t>(i);
}

void add_builders(valijson::SchemaParser& parser, const std::shared_ptr<detail::Tables>& t) {
  std::shared_ptr<const detail::Tables> ct = t;
  parser.addConstraintBuilder(detail::kPatternKey, builder([ct](const Adapter& v) -> Constraint* {
                                return new PatternConstraint(ct->patterns.at(index_of(v)));
                              }));
  parser.addConstraintBuilder(detail::kFormatKey, builder([ct](const Adapter& v) -> Constraint* {
                                return new FormatConstraint(ct, v.asString());
                              }));
  parser.addConstraintBuilder(detail::kMembersKey, builder([ct](const Adapter& v) -> Constraint* {
                                return new MembersConstraint(ct, index_of(v));
                              }));
}

// valijson reports, besides the failure itself, one summary error per enclosing object or array
// ("Failed to validate item #3 in array.", "Failed to validate against schema associated with
// property name 'seller'."). These carry no information once a deeper failure is reported.
bool is_summary(std::string_view msg) {
  return msg.starts_with("Failed to validate item #") ||
         msg.starts_with("Failed to validate against schema associated with property name") ||
         msg.starts_with("Failed to validate against additional properties schema") ||
         msg.starts_with("Failed to validate against schema associated with pattern");
}

bool is_below(std::string_view pointer, std::string_view parent) {
  return pointer.size() > parent.size() && pointer.starts_with(parent) && pointer[parent.size()] == '/';
}

// Borrows a valijson::Validator from the pool for one call and gives it back.
class Lease {
 public:
  Lease(std::mutex& mu, std::vector<std::unique_ptr<valijson::Validator>>& pool) : mu_(mu), pool_(pool) {
    std::lock_guard lock(mu_);
    if (!pool_.empty()) {
      v_ = std::move(pool_.back());
      pool_.pop_back();
    }
    if (!v_) v_ = std::make_unique<valijson::Validator>(valijson::Validator::kStrongTypes);
  }
  ~Lease() {
    std::lock_guard lock(mu_);
    pool_.push_back(std::move(v_));
  }
  valijson::Validator& operator*() { return *v_; }

 private:
  std::mutex& mu_;
  std::vector<std::unique_ptr<valijson::Validator>>& pool_;
  std::unique_ptr<valijson::Validator> v_;
};

}  // namespace

std::string context_to_pointer(const std::vector<std::string>& context) {
  std::string out;
  for (std::size_t i = 0; i < context.size(); ++i) {
    std::string_view c = context[i];
    if (i == 0 && c == "<root>") continue;
    if (c.size() >= 2 && c.front() == '[' && c.back() == ']') c = c.substr(1, c.size() - 2);
    out += '/';
    for (char ch : c) {
      if (ch == '~')
        out += "~0";
      else if (ch == '/')
        out += "~1";
      else
        out += ch;
    }
  }
  return out;
}

std::string keyword_of(std::string_view m) {
  struct Prefix {
    std::string_view prefix;
    std::string_view keyword;
  };
  static constexpr Prefix kPrefixes[] = {
      {"Value type not permitted by 'type'", "type"},
      {"Missing required property", "required"},
      {"Object contains a property that could not be validated", "additionalProperties"},
      {"Failed to validate against additional properties schema", "additionalProperties"},
      {"Failed to match against any enum values", "enum"},
      {"Failed to match expected value set by 'const'", "const"},
      {"Failed to match regex specified by 'pattern'", "pattern"},
      {"String should be a valid", "format"},
      {"String should be no more than", "maxLength"},
      {"String should be no fewer than", "minLength"},
      {"Expected number less than or equal to", "maximum"},
      {"Expected number less than", "exclusiveMaximum"},
      {"Expected number greater than or equal to", "minimum"},
      {"Expected number greater than", "exclusiveMinimum"},
      {"Array should contain no more than", "maxItems"},
      {"Array should contain no fewer than", "minItems"},
      {"Array contains more items than allowed", "items"},
      {"Elements at indexes", "uniqueItems"},
      {"Object should have no more than", "maxProperties"},
      {"Object should have no fewer than", "minProperties"},
      {"Value should be a multiple of", "multipleOf"},
      {"Value could not be converted", "multipleOf"},
      {"Failed to validate against any schemas allowed by anyOf", "anyOf"},
      {"Failed to validate against any child schemas allowed by oneOf", "oneOf"},
      {"Failed to validate against exactly one child schema", "oneOf"},
      {"Target should not validate against schema specified in 'not'", "not"},
      {"Failed to validate against child schema #", "allOf"},
      {"Failed to validate against a conditional schema", "if"},
      {"Failed to any values against subschema in 'contains'", "contains"},
      {"Missing dependency", "dependencies"},
      {"Failed to validate against dependent schema", "dependencies"},
      {"Failed to validate against schema associated with property name", "properties"},
      {"Failed to validate against schema associated with pattern", "patternProperties"},
      {"Failed to validate item #", "items"},
      {"Cannot validate item #", "items"},
  };
  for (const auto& p : kPrefixes)
    if (m.starts_with(p.prefix)) return std::string(p.keyword);
  return "schema";
}

Validator::Validator(const nlohmann::json& schema, std::string name, const SchemaLimits& limits)
    : name_(std::move(name)), tables_(std::make_shared<detail::Tables>()) {
  detail::PreparedSchema prepared = detail::prepare_schema(schema, name_, limits);
  schema_json_ = schema;
  in_place_depth_ = prepared.in_place_depth;
  tables_->patterns = std::move(prepared.patterns);
  tables_->members = std::move(prepared.members);
  // valijson recurses once per nested schema: parsed on a thread with a large stack.
  on_big_stack(kBigStack, [&] {
    try {
      valijson::SchemaParser parser(valijson::SchemaParser::kDraft7);
      add_builders(parser, tables_);
      schema_ = std::make_unique<valijson::Schema>();
      valijson::adapters::NlohmannJsonAdapter adapter(prepared.document);
      parser.populateSchema(adapter, *schema_);
      if (prepared.targets.empty()) return;
      // The member subschemas, parsed as the branches of one anyOf that refers to them in the
      // same document (served to valijson as a "remote" one), then taken from that anyOf.
      nlohmann::json refs = nlohmann::json::array();
      for (const auto& t : prepared.targets) refs.push_back({{"$ref", "quarry-internal://schema#" + t}});
      const nlohmann::json root = {{"anyOf", refs}};
      valijson::SchemaParser target_parser(valijson::SchemaParser::kDraft7);
      add_builders(target_parser, tables_);
      targets_ = std::make_unique<valijson::Schema>();
      valijson::adapters::NlohmannJsonAdapter root_adapter(root);
      target_parser.populateSchema(
          root_adapter, *targets_,
          [&](const std::string& uri) -> const nlohmann::json* {
            return uri == "quarry-internal://schema" ? &prepared.document : nullptr;
          },
          [](const nlohmann::json*) {});
      tables_->targets.assign(prepared.targets.size(), nullptr);
      valijson::Subschema::ApplyFunction take = [&](const Constraint& c) {
        if (const auto* any = dynamic_cast<const valijson::constraints::AnyOfConstraint*>(&c))
          any->applyToSubschemas([&](unsigned i, const valijson::Subschema* sub) {
            if (i < tables_->targets.size()) tables_->targets[i] = sub;
            return true;
          });
        return true;
      };
      targets_->apply(take);
      for (const auto* t : tables_->targets)
        if (!t) throw std::runtime_error("a patternProperties subschema could not be parsed");
    } catch (const InvalidSchema&) {
      throw;
    } catch (const std::exception& e) {
      throw InvalidSchema(name_, "", std::string("not a valid JSON Schema: ") + e.what());
    }
  });
}

Validator::~Validator() = default;

void Validator::add_check(Check check) { checks_.push_back(std::move(check)); }

std::vector<Violation> Validator::validate(const nlohmann::json& doc) const {
  std::vector<Violation> all;
  // valijson recurses per level of the document times the schema's in-place chains.
  const std::size_t depth = detail::json_depth(doc, kMaxValidationLevels);
  const std::size_t levels = (depth + 1) * (in_place_depth_ + 1);
  if (levels > kMaxValidationLevels) {
    std::vector<Violation> out{{"", "depth",
                                "the document is nested too deeply to validate (" + std::to_string(depth) +
                                    " levels of JSON against " + name_ + ")"}};
    for (const auto& check : checks_) check(doc, out);
    return out;
  }
  {
    Lease v(pool_mu_, pool_);
    valijson::ValidationResults results;
    valijson::adapters::NlohmannJsonAdapter target(doc);
    bool valid = true;
    auto run = [&] {
      try {
        valid = (*v).validate(*schema_, target, &results);
      } catch (const std::exception& e) {
        all.push_back({"", "valijson", name_ + ": validation stopped: " + e.what()});
      }
    };
    if (levels <= kSmallStackLevels) run();
    else on_big_stack(kBigStack, run);
    valijson::ValidationResults::Error err;
    while (results.popError(err))
      all.push_back({context_to_pointer(err.context), keyword_of(err.description), err.description});
    // valijson fails a `false` schema, and propertyNames, without an error of their own.
    if (!valid && all.empty())
      all.push_back({"", "schema", "the document does not validate against the schema (a false schema or propertyNames)"});
  }
  // Keep leaf failures: drop a summary error when a failure below its pointer explains it.
  std::vector<Violation> out;
  out.reserve(all.size());
  for (const auto& v : all) {
    bool explained = false;
    if (is_summary(v.message))
      for (const auto& w : all)
        if (!is_summary(w.message) && (w.pointer == v.pointer || is_below(w.pointer, v.pointer))) {
          explained = true;
          break;
        }
    if (!explained) out.push_back(v);
  }
  for (const auto& check : checks_) check(doc, out);
  return out;
}

std::shared_ptr<Validator> SchemaCache::get(std::string_view name) {
  std::lock_guard lock(mu_);
  auto it = compiled_.find(std::string(name));
  if (it != compiled_.end()) return it->second;
  const auto path = schema_dir() / std::string(name);
  auto v = std::make_shared<Validator>(load_schema_file(path), path.string());
  compiled_.emplace(std::string(name), v);
  return v;
}

}  // namespace quarry::schemas
