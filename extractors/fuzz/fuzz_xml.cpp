// libFuzzer target: the hardened XML parser and the XML extractor.
#include "extractors/fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const auto opts = quarry::fuzz::options();
  quarry::fuzz::consume(quarry::detail::extract_xml(bytes, quarry::fuzz::shell(bytes), opts));
  return 0;
}
