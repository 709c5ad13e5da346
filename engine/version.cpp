// Engine library identity (keeps the library non-empty while sub-parts are added).
#include "quarry/version.hpp"

namespace quarry::engine {
const char* version() { return QUARRY_VERSION; }
}  // namespace quarry::engine
