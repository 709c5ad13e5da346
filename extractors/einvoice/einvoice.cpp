#include "extractors/einvoice/einvoice.hpp"

#include "extractors/einvoice/formats.hpp"
#include "extractors/xml/xml_safe.hpp"

namespace quarry::einvoice {
namespace {

using detail::Json;

struct Format {
  std::string_view root;       ///< local name of the root element
  std::string_view ns;         ///< its namespace URI
  std::string_view name;       ///< Mapped::format
  std::string_view label;      ///< for error messages
  Json (*map)(const xmlNode*);
};

constexpr Format kFormats[] = {
    {"Invoice", "urn:oasis:names:specification:ubl:schema:xsd:Invoice-2", "ubl", "UBL Invoice", detail::map_ubl},
    {"CreditNote", "urn:oasis:names:specification:ubl:schema:xsd:CreditNote-2", "ubl", "UBL CreditNote",
     detail::map_ubl},
    {"CrossIndustryInvoice", "urn:un:unece:uncefact:data:standard:CrossIndustryInvoice:100", "cii",
     "CII CrossIndustryInvoice", detail::map_cii},
    {"CrossIndustryDocument", "urn:ferd:CrossIndustryDocument:invoice:1p0", "cii",
     "ZUGFeRD 1.0 CrossIndustryDocument", detail::map_cii},
    {"InvoiceData", "http://schemas.nav.gov.hu/OSA/3.0/data", "nav", "NAV InvoiceData 3.0", detail::map_nav},
};

// Bytes that cannot be XML at all (a PNG attachment, plain text) are "not an e-invoice", not an
// error: after an optional UTF-8 byte order mark and white space, XML starts with '<'; UTF-16 XML
// starts with its byte order mark, or without one has a NUL byte in its first character.
bool looks_like_xml(std::string_view b) {
  if (b.size() >= 2 && ((b[0] == '\xFE' && b[1] == '\xFF') || (b[0] == '\xFF' && b[1] == '\xFE'))) return true;
  if (b.size() >= 4 && b.substr(0, 4).find('\0') != std::string_view::npos && b.substr(0, 8).find('<') != std::string_view::npos)
    return true;
  if (b.starts_with("\xEF\xBB\xBF")) b.remove_prefix(3);
  const auto i = b.find_first_not_of(" \t\r\n");
  return i != std::string_view::npos && b[i] == '<';
}

}  // namespace

tl::expected<std::optional<Mapped>, ExtractError> map_xml(std::string_view bytes, const std::string& source,
                                                          const ExtractOptions& opts) {
  if (!opts.map_einvoices || !looks_like_xml(bytes)) return std::optional<Mapped>{};
  auto doc = xml::parse(bytes, source, opts);
  if (!doc) return tl::unexpected(doc.error());
  const xmlNode* root = xmlDocGetRootElement(doc->get());
  const std::string_view ns =
      root->ns && root->ns->href ? std::string_view(reinterpret_cast<const char*>(root->ns->href)) : "";
  for (const auto& f : kFormats) {
    if (xml::local_name(root) != f.root || ns != f.ns) continue;
    try {
      return std::optional<Mapped>(Mapped{f.map(root), std::string(f.name)});
    } catch (const detail::MapError& e) {
      return tl::unexpected(ExtractError{source, std::string(f.label) + ": " + e.what()});
    } catch (const std::exception& e) {  // e.g. std::bad_alloc, nlohmann type errors: never escape
      return tl::unexpected(ExtractError{source, std::string(f.label) + ": cannot be mapped: " + e.what()});
    }
  }
  return std::optional<Mapped>{};
}

}  // namespace quarry::einvoice
