// How a file's name appears in records and in the ledger. A path is bytes on Linux; records are JSON
// (UTF-8). A name that is valid UTF-8 is shown as it is. One that is not is shown with each byte of
// an invalid sequence written `\xHH` (two lowercase hex digits) and each backslash doubled, and its
// exact bytes are kept in base64 beside it (`source_base64` in the record). The same display string
// is the ledger's key, so a rerun or a recovery from results.jsonl matches the name again.
#pragma once

#include <string>
#include <string_view>

namespace quarry::run {

struct SourceName {
  std::string display;  ///< UTF-8
  std::string base64;   ///< the exact bytes (RFC 4648 base64) when `display` is not the name itself; else empty
};

/// Whether `s` is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, at most U+10FFFF).
bool is_utf8(std::string_view s);

/// The display form of a path's bytes (see above).
SourceName source_name(std::string_view path_bytes);

/// Base64 (RFC 4648, with padding) of `bytes`, by OpenSSL's EVP_EncodeBlock.
std::string base64(std::string_view bytes);

}  // namespace quarry::run
