#include "extractors/document.hpp"

namespace quarry {

std::string Document::text() const {
  std::string out;
  for (std::size_t p = 0; p < pages.size(); ++p) {
    if (p > 0) out += '\f';
    const auto& lines = pages[p].lines;
    for (std::size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) out += '\n';
      out += lines[i].text;
    }
  }
  return out;
}

}  // namespace quarry
