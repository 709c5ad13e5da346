#include "schemas/schemas.hpp"

#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>

namespace quarry::schemas {

std::filesystem::path schema_dir() {
  if (const char* env = std::getenv("QUARRY_SCHEMA_DIR"); env && *env) return env;
  return QUARRY_SCHEMA_DIR;
}

nlohmann::json load(std::string_view name) {
  auto path = schema_dir() / std::string(name);
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path.string() + ": cannot open schema");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw std::runtime_error(path.string() + ": malformed JSON: " + e.what());
  }
}

}  // namespace quarry::schemas
