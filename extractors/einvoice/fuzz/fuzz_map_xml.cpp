// libFuzzer target for quarry::einvoice::map_xml (built with -DQUARRY_FUZZ=ON and clang; see
// tests/einvoice/CMakeLists.txt, ctest label `fuzz`). Seeds: the real e-invoices of the corpora.
// Properties: never crashes, never throws, never hangs; a mapping always carries the fields the
// invoice schema requires to be non-null (number, issue date, currency, gross total).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "extractors/einvoice/einvoice.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view xml(reinterpret_cast<const char*>(data), size);
  quarry::ExtractOptions opts;
  opts.max_file_bytes = 1 << 20;
  auto r = quarry::einvoice::map_xml(xml, "fuzz.xml", opts);
  if (r && r->has_value()) {
    const auto& inv = (*r)->invoice;
    const bool ok = inv.at("invoice_number").is_string() && inv.at("issue_date").is_string() &&
                    inv.at("issue_date").get_ref<const std::string&>().size() == 10 &&
                    inv.at("currency").is_string() && inv.at("totals").at("gross").is_number();
    if (!ok) std::abort();
  }
  return 0;
}
