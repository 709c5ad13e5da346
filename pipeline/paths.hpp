// Where quarry finds what it ships: the default model, the schemas, the samples.
#pragma once

#include <filesystem>

namespace quarry {

/// The project's root folder (source tree), overridable with $QUARRY_HOME.
std::filesystem::path project_root();

/// The default model folder: project_root() / "models/quarry-extract-11m".
std::filesystem::path default_model_dir();

}  // namespace quarry
