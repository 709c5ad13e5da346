// `quarry ingest PATH...`: extract documents to JSON lines, one per document (or one per chunk).
//
// Folders are walked recursively in sorted order, hidden files and folders skipped. Every input
// gives exactly one record (or, with --chunks, one per chunk; a failed input still gives its error
// record); a bad file never stops the others. Exit: 0 all ok, 2 some failed, 1 usage/setup error.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <future>
#include <thread>
#include <memory>
#include <string>
#include <vector>

#include "extractors/extract.hpp"
#include "pipeline/chunk.hpp"
#include "pipeline/cli/commands.hpp"

namespace quarry::cli {
namespace {

namespace fs = std::filesystem;

struct IngestArgs {
  std::vector<std::string> paths;
  std::string output;
  bool chunks = false;
  std::size_t chunk_tokens = 1024;
  std::size_t chunk_overlap = 128;
  std::string pdf_password;
  bool no_einvoice = false;
  std::uint64_t max_file_mb = 256;
  std::size_t jobs = 1;
};

bool hidden(const fs::path& p) {
  const std::string name = p.filename().string();
  return !name.empty() && name[0] == '.';
}

// Expands folders into their files (recursive, sorted by path, hidden entries skipped). Paths that
// are not folders are kept as given, missing ones too: they become error records.
std::vector<fs::path> expand_inputs(const std::vector<std::string>& args) {
  std::vector<fs::path> out;
  for (const std::string& a : args) {
    const fs::path p(a);
    std::error_code ec;
    if (!fs::is_directory(p, ec)) {
      out.push_back(p);
      continue;
    }
    std::vector<fs::path> files;
    fs::recursive_directory_iterator it(p, fs::directory_options::skip_permission_denied, ec), end;
    for (; !ec && it != end; it.increment(ec)) {
      if (hidden(it->path())) {
        if (it->is_directory(ec)) it.disable_recursion_pending();
        continue;
      }
      if (it->is_directory(ec)) continue;
      files.push_back(it->path());
    }
    if (ec) spdlog::warn("{}: listing stopped early: {}", a, ec.message());
    std::sort(files.begin(), files.end());
    out.insert(out.end(), files.begin(), files.end());
  }
  return out;
}

nlohmann::json document_record(const Document& doc) {
  nlohmann::json j;
  j["source"] = doc.source;
  j["sha256"] = doc.sha256;
  j["media_type"] = doc.media_type;
  j["size"] = doc.size_bytes;
  j["status"] = "ok";
  j["pages"] = doc.pages.size();
  j["text"] = doc.text();
  j["metadata"] = doc.metadata;
  nlohmann::json atts = nlohmann::json::array();
  for (const Attachment& a : doc.attachments)
    atts.push_back({{"name", a.name}, {"media_type", a.media_type}, {"size", a.bytes.size()}});
  j["attachments"] = std::move(atts);
  if (doc.einvoice) {
    j["einvoice"] = *doc.einvoice;
    j["einvoice_format"] = doc.einvoice_format;
  }
  j["warnings"] = doc.warnings;
  return j;
}

std::string dump_line(const nlohmann::json& j) {
  // Invalid UTF-8 cannot come from the extractors, but a file name can carry it.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

/// What one input produced: its output lines (serialised), and the error when it failed.
struct Outcome {
  std::string source;
  std::vector<std::string> lines;
  std::string error;  ///< empty when ok
};

Outcome process(const fs::path& path, const ExtractOptions& opts, const IngestArgs& args) {
  Outcome o;
  o.source = path.string();
  auto bytes = read_file_bytes(path, opts);
  if (!bytes) {
    o.error = bytes.error().reason;
    o.lines.push_back(dump_line({{"source", o.source}, {"status", "error"}, {"error", o.error}}));
    return o;
  }
  auto doc = extract_bytes(*bytes, o.source, opts);
  if (!doc) {
    o.error = doc.error().reason;
    o.lines.push_back(dump_line({{"source", o.source},
                                 {"sha256", sha256_hex(*bytes)},
                                 {"media_type", detect_media_type(*bytes, path)},
                                 {"size", bytes->size()},
                                 {"status", "error"},
                                 {"error", o.error}}));
    return o;
  }
  bytes->clear();
  bytes->shrink_to_fit();
  if (!args.chunks) {
    o.lines.push_back(dump_line(document_record(*doc)));
    return o;
  }
  const EstimateTokenCounter counter;
  const ChunkOptions chunk_opts{args.chunk_tokens, args.chunk_overlap};
  for (const Chunk& c : chunk_document(*doc, counter, chunk_opts))
    o.lines.push_back(dump_line({{"source", o.source},
                                 {"sha256", doc->sha256},
                                 {"chunk", c.index},
                                 {"first_page", c.first_page},
                                 {"last_page", c.last_page},
                                 {"tokens", c.tokens},
                                 {"text", c.text}}));
  return o;
}

int run_ingest(const IngestArgs& args) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(nullptr, std::fclose);
  FILE* out = stdout;
  if (!args.output.empty() && args.output != "-") {
    file.reset(std::fopen(args.output.c_str(), "wb"));
    if (!file) {
      spdlog::error("cannot write {}: {}", args.output, std::strerror(errno));
      return 1;
    }
    out = file.get();
  }
  ExtractOptions opts;
  opts.pdf_password = args.pdf_password;
  opts.map_einvoices = !args.no_einvoice;
  opts.max_file_bytes = args.max_file_mb << 20;
  // The records carry text, not line boxes: skip poppler's second text pass per PDF page.
  opts.pdf_line_bboxes = false;

  // Up to `jobs` inputs are extracted at once; their records are written in input order, so the
  // output does not depend on the number of jobs.
  const std::vector<fs::path> inputs = expand_inputs(args.paths);
  const std::size_t jobs = std::max<std::size_t>(1, args.jobs);
  std::deque<std::future<Outcome>> window;
  std::size_t next = 0, ok = 0, failed = 0;
  auto launch = [&] {
    window.push_back(std::async(std::launch::async, process, inputs[next], std::cref(opts), std::cref(args)));
    ++next;
  };
  while (next < inputs.size() && window.size() < jobs) launch();
  while (!window.empty()) {
    Outcome o = window.front().get();
    window.pop_front();
    if (next < inputs.size()) launch();
    if (o.error.empty()) {
      ++ok;
    } else {
      ++failed;
      spdlog::warn("{}: {}", o.source, o.error);
    }
    for (const std::string& line : o.lines) {
      if (std::fwrite(line.data(), 1, line.size(), out) != line.size()) {
        spdlog::error("cannot write the output: {}", std::strerror(errno));
        for (auto& f : window) f.wait();
        return 1;
      }
    }
  }
  if (std::fflush(out) != 0) {
    spdlog::error("cannot write the output: {}", std::strerror(errno));
    return 1;
  }
  spdlog::info("ingest: {} ok, {} failed", ok, failed);
  return failed > 0 ? 2 : 0;
}

}  // namespace

void add_ingest_command(CLI::App& app, Context& ctx) {
  auto args = std::make_shared<IngestArgs>();
  auto* sub = app.add_subcommand(
      "ingest",
      "Extract documents (PDF, HTML, XML, text, Markdown) to JSON lines: one line per document\n"
      "{source, sha256, media_type, size, status \"ok\"|\"error\", error, pages, text, metadata,\n"
      "attachments [{name, media_type, size}], einvoice, einvoice_format, warnings}, or with --chunks one\n"
      "line per chunk {source, sha256, chunk, first_page, last_page, tokens, text}.\n"
      "Folders are read recursively in sorted order; hidden files are skipped.\n"
      "Exit codes: 0 all documents ok; 2 some failed (each has an error record); 1 usage error.");
  sub->add_option("paths", args->paths, "Files and folders to ingest")->required();
  sub->add_option("-o,--output", args->output, "Write the JSON lines to FILE instead of stdout");
  sub->add_flag("--chunks", args->chunks, "Emit token-bounded chunks instead of whole documents");
  sub->add_option("--chunk-tokens", args->chunk_tokens, "Chunk size limit in (estimated) tokens")
      ->check(CLI::Range(std::size_t{16}, std::size_t{1} << 24))
      ->capture_default_str();
  sub->add_option("--chunk-overlap", args->chunk_overlap, "Tokens repeated from the previous chunk")
      ->capture_default_str();
  args->jobs = std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1, 8);
  sub->add_option("-j,--jobs", args->jobs, "Documents extracted in parallel (output order is the input order)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{256}))
      ->capture_default_str();
  sub->add_option("--pdf-password", args->pdf_password, "Password for encrypted PDFs");
  sub->add_flag("--no-einvoice", args->no_einvoice, "Do not map structured e-invoices to invoice JSON");
  sub->add_option("--max-file-mb", args->max_file_mb, "Refuse inputs larger than this many MiB")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{4096}))
      ->capture_default_str();
  sub->callback([&ctx, args] {
    if (args->chunk_overlap >= args->chunk_tokens) {
      spdlog::error("--chunk-overlap must be smaller than --chunk-tokens");
      ctx.exit_code = 1;
      return;
    }
    ctx.exit_code = run_ingest(*args);
  });
}

}  // namespace quarry::cli
