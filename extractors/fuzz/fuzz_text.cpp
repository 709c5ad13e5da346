// libFuzzer target: media type sniffing, text decoding (UTF-8/UTF-16/8-bit guess) and line splitting.
#include "extractors/extract.hpp"
#include "extractors/fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const auto opts = quarry::fuzz::options();
  const std::string mt = quarry::detect_media_type(bytes, "input.txt");
  auto r = quarry::detail::extract_text(bytes, quarry::fuzz::shell(bytes), opts);
  // Decoded text is always valid UTF-8.
  if (r && !quarry::detail::valid_utf8(r->text())) __builtin_trap();
  quarry::fuzz::consume(r);
  return static_cast<int>(mt.empty());
}
