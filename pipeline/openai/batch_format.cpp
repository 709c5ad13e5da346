#include "pipeline/openai/batch_format.hpp"

#include <fstream>

namespace quarry::openai {

namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

bool blank(std::string_view s) { return s.find_first_not_of(" \t\r\n") == std::string_view::npos; }

}  // namespace

BatchLine parse_batch_line(std::string_view text, std::size_t number) {
  BatchLine out;
  out.number = number;
  const std::string where = "line " + std::to_string(number) + ": ";
  json j = json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded()) {
    out.problem = where + "not valid JSON";
    return out;
  }
  if (!j.is_object()) {
    out.problem = where + "not a JSON object";
    return out;
  }
  if (j.contains("custom_id") && j["custom_id"].is_string() && !j["custom_id"].get<std::string>().empty())
    out.custom_id = j["custom_id"].get<std::string>();
  if (!out.custom_id) {
    out.problem = where + "'custom_id' is required (a non-empty string)";
    return out;
  }
  for (const auto& [key, value] : j.items()) {
    (void)value;
    if (key != "custom_id" && key != "method" && key != "url" && key != "body") {
      out.problem = where + "unknown member '" + key + "' (a request line has custom_id, method, url, body)";
      return out;
    }
  }
  if (j.contains("method") && !(j["method"].is_string() && j["method"].get<std::string>() == "POST")) {
    out.problem = where + "'method' must be \"POST\"";
    return out;
  }
  if (!j.contains("url") || !j["url"].is_string()) {
    out.problem = where + "'url' is required (\"/v1/chat/completions\" or \"/v1/completions\")";
    return out;
  }
  out.url = j["url"].get<std::string>();
  if (!endpoint_of_url(out.url)) {
    out.problem = where + "url \"" + out.url + "\" is not supported (\"/v1/chat/completions\" or \"/v1/completions\")";
    return out;
  }
  if (!j.contains("body") || !j["body"].is_object()) {
    out.problem = where + "'body' is required (a JSON object)";
    return out;
  }
  out.body = std::move(j["body"]);
  return out;
}

bool looks_like_batch_file(const std::filesystem::path& path) {
  if (path.extension() != ".jsonl") return false;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  constexpr std::size_t k_max = std::size_t{1} << 20;  // only the head of the file is read
  std::string head(k_max, '\0');
  in.read(head.data(), static_cast<std::streamsize>(k_max));
  head.resize(static_cast<std::size_t>(in.gcount()));
  const bool whole_file = head.size() < k_max;
  std::size_t start = 0;
  while (start < head.size()) {
    const auto end = head.find('\n', start);
    if (end == std::string::npos && !whole_file) return false;  // a first line longer than the head
    const std::string_view line =
        std::string_view(head).substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!blank(line)) {
      const json j = json::parse(line.begin(), line.end(), nullptr, false);
      return !j.is_discarded() && j.is_object() && j.contains("custom_id") && j.contains("body");
    }
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return false;
}

ojson batch_response_line(const std::string& custom_id, int status_code, const ojson& body) {
  ojson out;
  out["id"] = make_id("batch_req_");
  out["custom_id"] = custom_id;
  out["response"] = ojson{{"status_code", status_code}, {"request_id", make_id("req_")}, {"body", body}};
  out["error"] = nullptr;
  return out;
}

ojson batch_error_line(const std::optional<std::string>& custom_id, const std::string& code,
                       const std::string& message) {
  ojson out;
  out["id"] = make_id("batch_req_");
  out["custom_id"] = custom_id ? ojson(*custom_id) : ojson();
  out["response"] = nullptr;
  out["error"] = ojson{{"code", code}, {"message", message}};
  return out;
}

}  // namespace quarry::openai
