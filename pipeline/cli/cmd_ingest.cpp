// `quarry ingest PATH...`: extract documents to JSON lines, one per document (or one per chunk).
//
// Folders are walked recursively in sorted order, hidden files and folders skipped. Every input
// gives exactly one record (or, with --chunks, one per chunk; a failed input still gives its error
// record); a bad file never stops the others. Exit: 0 all ok, 2 some failed, 1 usage/setup error.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
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

class Writer {
 public:
  explicit Writer(FILE* f) : f_(f) {}
  bool write(const nlohmann::json& j) {
    // Invalid UTF-8 cannot reach here from the extractors, but a file name can carry it.
    const std::string line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    return std::fwrite(line.data(), 1, line.size(), f_) == line.size();
  }

 private:
  FILE* f_;
};

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
  Writer writer(out);
  ExtractOptions opts;
  opts.pdf_password = args.pdf_password;
  opts.map_einvoices = !args.no_einvoice;
  opts.max_file_bytes = args.max_file_mb << 20;
  // The records carry text, not line boxes: skip poppler's second text pass per PDF page.
  opts.pdf_line_bboxes = false;
  EstimateTokenCounter counter;
  ChunkOptions chunk_opts{args.chunk_tokens, args.chunk_overlap};

  std::size_t ok = 0, failed = 0;
  for (const fs::path& path : expand_inputs(args.paths)) {
    const std::string source = path.string();
    nlohmann::json failure;
    auto bytes = read_file_bytes(path, opts);
    if (!bytes) {
      failure = {{"source", source}, {"status", "error"}, {"error", bytes.error().reason}};
    } else {
      auto doc = extract_bytes(*bytes, source, opts);
      if (!doc) {
        failure = {{"source", source},
                   {"sha256", sha256_hex(*bytes)},
                   {"media_type", detect_media_type(*bytes, path)},
                   {"size", bytes->size()},
                   {"status", "error"},
                   {"error", doc.error().reason}};
      } else {
        ++ok;
        bytes->clear();
        bytes->shrink_to_fit();
        for (const std::string& w : doc->warnings) spdlog::debug("{}: {}", source, w);
        bool written = true;
        if (args.chunks) {
          for (const Chunk& c : chunk_document(*doc, counter, chunk_opts))
            written = written && writer.write({{"source", source},
                                               {"sha256", doc->sha256},
                                               {"chunk", c.index},
                                               {"first_page", c.first_page},
                                               {"last_page", c.last_page},
                                               {"tokens", c.tokens},
                                               {"text", c.text}});
        } else {
          written = writer.write(document_record(*doc));
        }
        if (!written) {
          spdlog::error("cannot write the output: {}", std::strerror(errno));
          return 1;
        }
        continue;
      }
    }
    ++failed;
    spdlog::warn("{}: {}", source, failure["error"].get<std::string>());
    if (!writer.write(failure)) {
      spdlog::error("cannot write the output: {}", std::strerror(errno));
      return 1;
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
