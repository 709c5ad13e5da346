// Locating and loading the JSON Schemas that quarry ships (schemas/*.schema.json).
#pragma once

#include <filesystem>
#include <string_view>

#include <nlohmann/json.hpp>

namespace quarry::schemas {

/// Folder holding the shipped schemas: $QUARRY_SCHEMA_DIR if set, else the source tree's schemas/.
std::filesystem::path schema_dir();

/// Loads `schema_dir()/name` (e.g. "invoice.schema.json") with load_schema_file's limits. Throws
/// InvalidSchema (a std::runtime_error) naming the file on a missing, malformed or too large file.
nlohmann::json load(std::string_view name);

}  // namespace quarry::schemas
