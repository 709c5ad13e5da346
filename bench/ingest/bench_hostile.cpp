// Hostile inputs against the extractors: wall time and peak resident memory of extracting each one,
// in a child process per run (fork; getrusage through wait4), with the outcome (a Document with its
// warnings, or the error). The inputs are the ones of the hardening work, made at run time by
// tests/extractors/hostile_inputs.hpp (a few MB each, however much they expand to).
//
// usage: bench_hostile [--out DIR] [--repeats N] [--write DIR] [--only NAME]
//   Runs each case N times (default 3) and reports the median time and the largest peak RSS.
//   --write DIR also writes every input to DIR (to feed `quarry ingest` or another build).
// Writes DIR/hostile.json and DIR/hostile.md.
#include <sys/utsname.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "extractors/extract.hpp"
#include "tests/extractors/child.hpp"
#include "tests/extractors/corpus.hpp"
#include "tests/extractors/hostile_inputs.hpp"

namespace {

namespace fs = std::filesystem;
namespace h = quarry::test::hostile;

struct Case {
  std::string name, what, file_name;
  std::function<std::string()> make;
};

std::string outcome(const std::string& bytes, const std::string& name) {
  auto doc = quarry::extract_bytes(bytes, name);
  if (!doc) return "error: " + doc.error().reason;
  std::string s = "ok: " + std::to_string(doc->pages.size()) + " page(s), " + std::to_string(doc->text().size()) +
                  " text bytes, " + std::to_string(doc->attachments.size()) + " attachment(s)";
  if (doc->einvoice) s += ", " + doc->einvoice_format + " invoice " + (*doc->einvoice)["invoice_number"].dump();
  for (const auto& w : doc->warnings) s += "; " + w;
  return s;
}

std::string nav_utf16() {
  const auto dir = quarry::test::corpora() / "nav" / "xml";
  if (!fs::is_directory(dir)) return {};
  const auto files = quarry::test::files_in(dir);
  std::ifstream in(files.front(), std::ios::binary);
  std::string utf8{std::istreambuf_iterator<char>(in), {}};
  const std::string decl = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>";
  if (utf8.rfind(decl, 0) == 0) utf8 = "<?xml version=\"1.0\" encoding=\"UTF-16\"?>" + utf8.substr(decl.size());
  return "\xFF\xFE" + h::encode(utf8, "UTF-16LE");
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  fs::path out_dir = "bench-out/ingest", write_dir;
  int repeats = 3;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--out" && i + 1 < argc) {
      out_dir = argv[++i];
    } else if (a == "--repeats" && i + 1 < argc) {
      repeats = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--write" && i + 1 < argc) {
      write_dir = argv[++i];
    } else if (a == "--only" && i + 1 < argc) {
      only = argv[++i];
    } else {
      std::cerr << "usage: bench_hostile [--out DIR] [--repeats N] [--write DIR] [--only NAME]\n";
      return 1;
    }
  }
  const std::vector<Case> cases = {
      {"xml_100k_attributes", "XML element with 100,000 attributes", "attributes.xml", [] { return h::many_attributes(100000, false); }},
      {"html_100k_attributes", "HTML element with 100,000 attributes", "attributes.html", [] { return h::many_attributes(100000, true); }},
      {"pdf_shared_1gib_stream", "10 PDF pages sharing one 1 GiB content stream", "shared.pdf", [] { return h::pdf_shared_content(10, 1024); }},
      {"pdf_400mb_text_form", "PDF page showing 400 MB of text through a form XObject", "text-form.pdf", [] { return h::pdf_text_through_form(10000); }},
      {"pdf_400mb_text_stream", "PDF page whose content stream shows 400 MB of text", "text-stream.pdf", [] { return h::pdf_text_in_stream(400); }},
      {"pdf_font_1gib", "5 PDF pages listing a Type 1 font whose program inflates to 1 GiB", "font.pdf", [] { return h::pdf_font_bomb(5, 1024); }},
      {"pdf_attachment_1gib", "PDF embedding a file of /Size 100 that inflates to 1 GiB", "attachment.pdf", [] { return h::pdf_attachment_bomb(1024); }},
      {"xml_utf16_billion_laughs", "billion laughs in UTF-16LE", "laughs-utf16.xml", [] { return h::billion_laughs_utf16(); }},
      {"xml_nav_utf16", "NAV invoice XML re-encoded as UTF-16LE", "nav-utf16.xml", nav_utf16},
      {"html_5m_elements", "HTML page of 5,000,000 paragraphs (39 MB)", "elements.html", [] { return h::many_elements(5000000, true); }},
  };
  if (!write_dir.empty()) fs::create_directories(write_dir);

  utsname u{};
  uname(&u);
  nlohmann::json j;
  j["bench"] = "hostile";
  j["machine"] = {{"kernel", std::string(u.sysname) + " " + u.release}, {"hardware_threads", std::thread::hardware_concurrency()}};
  j["repeats"] = repeats;
  std::string md = "| input | input bytes | median s | peak RSS MiB | outcome |\n| --- | ---: | ---: | ---: | --- |\n";
  for (const auto& c : cases) {
    if (!only.empty() && c.name != only) continue;
    const std::string bytes = c.make();
    if (bytes.empty()) continue;  // (the corpora are not there)
    if (!write_dir.empty()) std::ofstream(write_dir / c.file_name, std::ios::binary) << bytes;
    std::vector<double> seconds;
    long rss = 0;
    std::string result;
    bool finished = true;
    for (int r = 0; r < repeats; ++r) {
      auto run = quarry::test::in_child([&] { return outcome(bytes, c.file_name); }, 600);
      seconds.push_back(run.seconds);
      rss = std::max(rss, run.max_rss_kb);
      result = run.output;
      finished = finished && run.finished;
    }
    if (!finished) result = "killed or timed out; " + result;
    const double m = median(seconds);
    j["results"][c.name] = {{"what", c.what}, {"input_bytes", bytes.size()}, {"median_s", m}, {"samples_s", seconds},
                            {"peak_rss_kib", rss}, {"outcome", result}};
    char row[256];
    std::snprintf(row, sizeof row, "| %s | %zu | %.2f | %.0f | ", c.what.c_str(), bytes.size(), m, rss / 1024.0);
    std::string shown = result.size() > 300 ? result.substr(0, 300) + "..." : result;
    std::replace(shown.begin(), shown.end(), '|', '/');
    md += row + shown + " |\n";
    std::cerr << c.name << ": " << m << " s, " << rss / 1024 << " MiB\n";
  }
  fs::create_directories(out_dir);
  std::ofstream(out_dir / "hostile.json") << j.dump(2) << "\n";
  std::ofstream(out_dir / "hostile.md") << md;
  std::cout << md;
  return 0;
}
