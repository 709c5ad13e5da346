// Schema load cost against schema size: wall time and peak memory of compiling a generated schema to
// a grammar (engine/grammar/json_schema) and of loading it into the validator (schemas/validate),
// the two places every `quarry run --schema` goes through. One measurement per process (peak memory
// is per process), so run it once per kind, size and stage.
//
// usage: bench_schema_size --kind properties|document [--count N] [--bytes B] [--stage grammar|validator]
//                          [--repeats R] [--write FILE]
//   properties  N optional string properties with a description (default N = 14000)
//   document    about B bytes (default 5,000,000) of realistic definitions: object types of 30 mixed
//               properties (strings with lengths and patterns, enums, bounded numbers, dates, nested
//               objects, arrays of other types by $ref), half of them required; the root object has
//               one optional property per type
//   --write     writes the generated schema to FILE and exits (for `quarry schema compile FILE`,
//               `quarry run --schema FILE`)
// Prints one JSON line: kind, size, schema bytes, stage, ms of each repeat (median too), peak RSS
// growth in MiB (VmHWM at the end minus VmRSS before the first load), and the result (ok or the
// error message).
#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/grammar/json_schema.hpp"
#include "schemas/validate.hpp"

namespace eg = quarry::engine::grammar;
using Clock = std::chrono::steady_clock;
using ojson = nlohmann::ordered_json;

namespace {

// Resident set figures of this process from /proc/self/status, in MiB.
double status_mib(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key + ":", 0) == 0) return std::stod(line.substr(key.size() + 1)) / 1024.0;
  return 0;
}

std::string pad(std::size_t i, int width) {
  std::string s = std::to_string(i);
  return std::string(static_cast<std::size_t>(std::max(0, width - static_cast<int>(s.size()))), '0') + s;
}

ojson properties_schema(std::size_t n) {
  ojson props = ojson::object();
  for (std::size_t i = 0; i < n; ++i)
    props["field_" + pad(i, 5)] = {{"type", "string"}, {"description", "Field number " + std::to_string(i)}};
  return {{"type", "object"}, {"properties", props}};
}

ojson object_type(std::size_t k, std::size_t types) {
  ojson props = ojson::object();
  ojson required = ojson::array();
  const std::string t = pad(k, 5);
  for (std::size_t p = 0; p < 30; ++p) {
    const std::string name = "t" + t + "_p" + pad(p, 2);
    ojson s;
    switch (p % 6) {
      case 0: s = {{"type", "string"}, {"minLength", 1}, {"maxLength", 64}}; break;
      case 1: s = {{"type", "string"}, {"pattern", "^[A-Z]{2}[0-9A-Z]{2,30}$"}}; break;
      case 2: s = {{"type", "string"}, {"enum", {"draft", "issued", "paid", "cancelled", "disputed"}}}; break;
      case 3: s = {{"type", "number"}, {"minimum", 0}, {"maximum", 1000000}}; break;
      case 4: s = {{"type", "string"}, {"pattern", "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"}}; break;
      default:
        s = {{"type", "array"},
             {"maxItems", 8},
             {"items", {{"$ref", "#/definitions/type_" + pad((k + p) % types, 5)}}}};
    }
    s["description"] = "Property " + std::to_string(p) + " of type " + t + ", generated for the size bench.";
    props[name] = s;
    if (p % 2 == 0) required.push_back(name);
  }
  return {{"type", "object"}, {"properties", props}, {"required", required}, {"additionalProperties", false}};
}

ojson document_schema(std::size_t bytes) {
  // One type is about 4.7 kB of JSON (the root's property for it included).
  const std::size_t types = std::max<std::size_t>(1, bytes / 4700);
  ojson defs = ojson::object();
  ojson props = ojson::object();
  for (std::size_t k = 0; k < types; ++k) {
    defs["type_" + pad(k, 5)] = object_type(k, types);
    props["item_" + pad(k, 5)] = {{"$ref", "#/definitions/type_" + pad(k, 5)}};
  }
  return {{"$schema", "http://json-schema.org/draft-07/schema#"},
          {"type", "object"},
          {"properties", props},
          {"definitions", defs}};
}

}  // namespace

int main(int argc, char** argv) {
  std::string kind = "properties", stage = "grammar", write;
  std::size_t count = 14000, bytes = 5000000;
  int repeats = 1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--kind") kind = next();
    else if (a == "--count") count = std::stoul(next());
    else if (a == "--bytes") bytes = std::stoul(next());
    else if (a == "--stage") stage = next();
    else if (a == "--repeats") repeats = std::stoi(next());
    else if (a == "--write") write = next();
    else {
      std::cerr << "unknown option " << a << "\n";
      return 1;
    }
  }
  ojson schema;
  if (kind == "properties") schema = properties_schema(count);
  else if (kind == "document") schema = document_schema(bytes);
  else {
    std::cerr << "unknown kind " << kind << "\n";
    return 1;
  }
  const std::string text = schema.dump();
  if (!write.empty()) {
    std::ofstream(write) << text;
    std::cerr << write << ": " << text.size() << " bytes\n";
    return 0;
  }
  schema = ojson();
  const double rss0 = status_mib("VmRSS");
  std::vector<double> ms;
  std::string result = "ok";
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    try {
      if (stage == "grammar") {
        auto res = eg::compile_json_schema(std::string_view(text));
        if (r == 0)
          result = "ok: " + std::to_string(res.grammar->nodes.size()) + " nodes, " +
                   std::to_string(res.grammar->num_byte_edges()) + " byte edges";
      } else {
        quarry::schemas::Validator v(nlohmann::json::parse(text), "generated.schema.json");
        auto violations = v.validate(nlohmann::json::object());
        if (r == 0) result = "ok: " + std::to_string(violations.size()) + " violations of {}";
      }
    } catch (const std::exception& e) {
      result = std::string("error: ") + e.what();
      result.resize(std::min<std::size_t>(result.size(), 300));
    }
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  nlohmann::json out = {{"kind", kind},
                        {"count", kind == "properties" ? count : 0},
                        {"schema_bytes", text.size()},
                        {"stage", stage},
                        {"ms", ms},
                        {"ms_median", sorted[sorted.size() / 2]},
                        {"peak_rss_growth_mib", status_mib("VmHWM") - rss0},
                        {"result", result}};
  std::cout << out.dump() << "\n";
  return 0;
}
