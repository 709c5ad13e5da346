// libFuzzer target: the PDF extractor (text through poppler's text engine under the limits, line boxes,
// metadata, attachments through qpdf).
#include "extractors/fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const auto opts = quarry::fuzz::options();
  quarry::fuzz::consume(quarry::detail::extract_pdf(bytes, quarry::fuzz::shell(bytes), opts));
  return 0;
}
