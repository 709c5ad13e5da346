#include "pipeline/paths.hpp"

#include <cstdlib>

namespace quarry {

std::filesystem::path project_root() {
  if (const char* env = std::getenv("QUARRY_HOME"); env && *env) return env;
  return QUARRY_SOURCE_DIR;
}

std::filesystem::path default_model_dir() { return project_root() / "models" / "quarry-extract-11m"; }

}  // namespace quarry
