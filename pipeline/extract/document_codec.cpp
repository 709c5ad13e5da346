#include "pipeline/extract/document_codec.hpp"

#include <nlohmann/json.hpp>
#include <stdexcept>

namespace quarry::extract {

namespace {

using json = nlohmann::json;

// Layout: [source, sha256, media_type, size_bytes, pages, metadata, attachments, einvoice|null,
//          einvoice_format, warnings]
//   page: [number, width, height, lines]; line: [text, block] or [text, block, x0, y0, x1, y1]
//   attachment: [name, media_type, description, size]

json bin(const std::string& s) { return json::binary(std::vector<std::uint8_t>(s.begin(), s.end())); }

std::string str(const json& j) {
  if (j.is_binary()) return std::string(j.get_binary().begin(), j.get_binary().end());
  return j.get<std::string>();
}

}  // namespace

std::vector<std::uint8_t> encode_document(const Document& d) {
  json pages = json::array();
  for (const auto& p : d.pages) {
    json lines = json::array();
    for (const auto& l : p.lines) {
      json line = json::array({bin(l.text), l.block});
      if (l.bbox) {
        line.push_back(l.bbox->x0);
        line.push_back(l.bbox->y0);
        line.push_back(l.bbox->x1);
        line.push_back(l.bbox->y1);
      }
      lines.push_back(std::move(line));
    }
    pages.push_back(json::array({p.number, p.width, p.height, std::move(lines)}));
  }
  json meta = json::array();
  for (const auto& [k, v] : d.metadata) meta.push_back(json::array({bin(k), bin(v)}));
  json atts = json::array();
  for (const auto& a : d.attachments)
    atts.push_back(json::array({bin(a.name), bin(a.media_type), bin(a.description), a.bytes.size()}));
  json warnings = json::array();
  for (const auto& w : d.warnings) warnings.push_back(bin(w));
  const json j = json::array({bin(d.source), d.sha256, d.media_type, d.size_bytes, std::move(pages), std::move(meta),
                              std::move(atts), d.einvoice ? *d.einvoice : json(nullptr), d.einvoice_format,
                              std::move(warnings)});
  return json::to_msgpack(j);
}

ExtractedDocument decode_document(const std::uint8_t* data, std::size_t size) {
  ExtractedDocument out;
  try {
    const json j = json::from_msgpack(data, data + size);
    Document& d = out.doc;
    d.source = str(j.at(0));
    d.sha256 = j.at(1).get<std::string>();
    d.media_type = j.at(2).get<std::string>();
    d.size_bytes = j.at(3).get<std::uint64_t>();
    for (const auto& p : j.at(4)) {
      Page page;
      page.number = p.at(0).get<int>();
      page.width = p.at(1).get<double>();
      page.height = p.at(2).get<double>();
      for (const auto& l : p.at(3)) {
        Line line;
        line.text = str(l.at(0));
        line.block = l.at(1).get<int>();
        if (l.size() >= 6) line.bbox = BBox{l.at(2).get<double>(), l.at(3).get<double>(), l.at(4).get<double>(), l.at(5).get<double>()};
        page.lines.push_back(std::move(line));
      }
      d.pages.push_back(std::move(page));
    }
    for (const auto& kv : j.at(5)) d.metadata[str(kv.at(0))] = str(kv.at(1));
    for (const auto& a : j.at(6)) {
      Attachment att;
      att.name = str(a.at(0));
      att.media_type = str(a.at(1));
      att.description = str(a.at(2));
      d.attachments.push_back(std::move(att));
      out.attachment_bytes.push_back(a.at(3).get<std::uint64_t>());
    }
    if (!j.at(7).is_null()) d.einvoice = j.at(7);
    d.einvoice_format = j.at(8).get<std::string>();
    for (const auto& w : j.at(9)) d.warnings.push_back(str(w));
  } catch (const json::exception& e) {
    throw std::runtime_error(std::string("extracted document: malformed: ") + e.what());
  }
  return out;
}

}  // namespace quarry::extract
