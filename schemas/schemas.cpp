#include "schemas/schemas.hpp"

#include <cstdlib>
#include <string>

#include "schemas/schema_check.hpp"

namespace quarry::schemas {

std::filesystem::path schema_dir() {
  if (const char* env = std::getenv("QUARRY_SCHEMA_DIR"); env && *env) return env;
  return QUARRY_SCHEMA_DIR;
}

nlohmann::json load(std::string_view name) { return load_schema_file(schema_dir() / std::string(name)); }

}  // namespace quarry::schemas
