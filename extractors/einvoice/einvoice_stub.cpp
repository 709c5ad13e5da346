// TEMPORARY: recognises nothing, so that the extractors link before the real mappers are merged.
#include "extractors/einvoice/einvoice.hpp"

namespace quarry::einvoice {

tl::expected<std::optional<Mapped>, ExtractError> map_xml(std::string_view, const std::string&,
                                                         const ExtractOptions&) {
  return std::optional<Mapped>{};
}

}  // namespace quarry::einvoice
