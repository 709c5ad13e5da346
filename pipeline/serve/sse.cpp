#include "pipeline/serve/sse.hpp"

#include <algorithm>

namespace quarry::serve {

std::string sse_event(const nlohmann::ordered_json& body) {
  // dump() escapes control characters, so the JSON is one line and cannot end the event early.
  std::string out = "data: ";
  out += body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  out += "\n\n";
  return out;
}

std::size_t utf8_complete_prefix(std::string_view text, std::size_t limit) {
  limit = std::min(limit, text.size());
  // Walk back over at most 3 continuation bytes to the lead byte of the last sequence.
  std::size_t i = limit;
  std::size_t continuation = 0;
  while (i > 0 && continuation < 3 && (static_cast<unsigned char>(text[i - 1]) & 0xC0) == 0x80) {
    --i;
    ++continuation;
  }
  if (i == 0) return continuation == 0 ? 0 : limit;  // only continuation bytes: invalid, pass them on
  const auto lead = static_cast<unsigned char>(text[i - 1]);
  std::size_t need = 0;  // bytes of the sequence the lead byte starts
  if ((lead & 0x80) == 0) need = 1;
  else if ((lead & 0xE0) == 0xC0) need = 2;
  else if ((lead & 0xF0) == 0xE0) need = 3;
  else if ((lead & 0xF8) == 0xF0) need = 4;
  else return limit;  // a stray continuation byte or an invalid lead: nothing to wait for
  if (need == 1) return limit;  // ASCII, and any continuation bytes after it are stray
  return continuation + 1 >= need ? limit : i - 1;
}

TextDeltas::TextDeltas(const std::vector<std::string>& stop_strings) {
  for (const auto& s : stop_strings) {
    if (s.empty()) continue;
    stops_.push_back(s);
    holdback_ = std::max(holdback_, s.size() - 1);
  }
}

std::string TextDeltas::next(std::string_view text) {
  if (text.size() <= sent_ + holdback_) return {};
  std::size_t limit = text.size() - holdback_;
  // The engine reports a token before it looks for stop strings in the text: a stop string may be
  // complete in `text` already. What precedes its first occurrence is final, the rest is cut.
  const std::size_t from = sent_ > holdback_ ? sent_ - holdback_ : 0;
  for (const auto& s : stops_)
    if (const std::size_t at = text.find(s, from); at != std::string_view::npos) limit = std::min(limit, at);
  if (limit <= sent_) return {};
  const std::size_t end = utf8_complete_prefix(text, limit);
  if (end <= sent_) return {};
  std::string out(text.substr(sent_, end - sent_));
  sent_ = end;
  return out;
}

std::string TextDeltas::finish(std::string_view final_text) {
  if (final_text.size() <= sent_) return {};
  std::string out(final_text.substr(sent_));
  sent_ = final_text.size();
  return out;
}

}  // namespace quarry::serve
