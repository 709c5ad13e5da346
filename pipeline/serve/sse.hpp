// Server-sent events for the streaming responses of `quarry serve` (the OpenAI API's `stream: true`):
// the wire format and the text deltas cut from a growing generation.
//
// Wire format (WHATWG HTML, "Server-sent events"; what the OpenAI API sends): one event per chunk,
// `data: {json}\n\n`, and the stream ends with `data: [DONE]\n\n`. Lines starting with ':' are comments
// that clients ignore (used as a keep-alive and to notice a client that went away).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace quarry::serve {

/// `data: <body as compact JSON>\n\n`.
std::string sse_event(const nlohmann::ordered_json& body);
/// The event that ends an OpenAI stream: `data: [DONE]\n\n`.
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";
/// A comment event (`: keep-alive\n\n`), ignored by clients.
inline constexpr std::string_view kSseKeepAlive = ": keep-alive\n\n";

/// The length of the longest prefix of `text[0, limit)` that does not end inside a UTF-8 sequence
/// (a lead byte whose continuation bytes are not all there yet). Invalid bytes count as complete.
std::size_t utf8_complete_prefix(std::string_view text, std::size_t limit);

/// Text deltas of one streamed generation. The engine reports token ids one at a time; the text of the
/// tokens so far may end in the middle of a UTF-8 character, or in the first bytes of a stop string
/// that the engine will cut from the final text (or a whole stop string: the token is reported before
/// the engine looks for stop strings). next() sends only what can no longer change: up to a UTF-8
/// boundary, short of the last (longest stop string - 1) bytes (vLLM's detokenizer holds back the
/// same) and before the first stop string in the text; finish() sends the rest of the engine's final text.
class TextDeltas {
 public:
  explicit TextDeltas(const std::vector<std::string>& stop_strings);
  /// `text`: the decoded text of every token so far (grows monotonically). Returns what is new and safe.
  std::string next(std::string_view text);
  /// `final_text`: the result's text (cut before a stop string). Returns what was not sent yet.
  std::string finish(std::string_view final_text);
  /// Bytes sent so far.
  std::size_t sent() const { return sent_; }

 private:
  std::vector<std::string> stops_;
  std::size_t holdback_ = 0;
  std::size_t sent_ = 0;
};

}  // namespace quarry::serve
