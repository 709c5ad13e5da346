// `quarry ingest PATH...`: extract documents to JSON lines, one per document (or one per chunk).
//
// Folders are walked recursively in sorted order, hidden files and folders skipped. Every input
// gives exactly one record (or, with --chunks, one per chunk; a failed input still gives its error
// record); a bad file never stops the others. Documents are parsed in extraction worker processes
// with the same per-document limits as `quarry run` (pipeline/extract/extractor.hpp); a special file
// is never opened. A file name that is not UTF-8 is shown with its invalid bytes escaped, its exact
// bytes in "source_base64". Exit: 0 all ok, 2 some failed, 1 usage/setup error.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <condition_variable>
#include <map>
#include <filesystem>
#include <thread>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include <mutex>

#include "extractors/extract.hpp"
#include "pipeline/chunk.hpp"
#include "pipeline/cli/commands.hpp"
#include "pipeline/extract/extractor.hpp"
#include "pipeline/extract/input_file.hpp"
#include "pipeline/run/source_name.hpp"

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
  std::uint64_t max_file_mb = 256, max_text_mb = 64, max_page_text_mb = 4, max_attachment_mb = 32, max_pages = 5000,
                max_content_mb = 256, max_page_content_mb = 64;
  double extract_timeout = 30;
  std::uint64_t extract_memory_mb = 1024;
  bool no_isolation = false;
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

/// "source" (and "source_base64" for a name that is not UTF-8) of a record.
nlohmann::json source_fields(const fs::path& path) {
  const auto name = run::source_name(path.native());
  nlohmann::json j;
  j["source"] = name.display;
  if (!name.base64.empty()) j["source_base64"] = name.base64;
  return j;
}

nlohmann::json document_record(const fs::path& path, const extract::ExtractedDocument& x) {
  const Document& doc = x.doc;
  nlohmann::json j = source_fields(path);
  j["sha256"] = doc.sha256;
  j["media_type"] = doc.media_type;
  j["size"] = doc.size_bytes;
  j["status"] = "ok";
  j["pages"] = doc.pages.size();
  j["text"] = doc.text();
  j["metadata"] = doc.metadata;
  nlohmann::json atts = nlohmann::json::array();
  for (std::size_t i = 0; i < doc.attachments.size(); ++i) {
    const Attachment& a = doc.attachments[i];
    atts.push_back({{"name", a.name}, {"media_type", a.media_type},
                    {"size", i < x.attachment_bytes.size() ? x.attachment_bytes[i] : 0}});
  }
  j["attachments"] = std::move(atts);
  if (doc.einvoice) {
    j["einvoice"] = *doc.einvoice;
    j["einvoice_format"] = doc.einvoice_format;
  }
  j["warnings"] = doc.warnings;
  return j;
}

std::string dump_line(const nlohmann::json& j) {
  // Names are escaped to UTF-8 (source_fields); replace is a last guard for anything else.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

/// What one input produced: its output lines (serialised), and the error when it failed.
struct Outcome {
  std::string source;
  std::vector<std::string> lines;
  std::string error;  ///< empty when ok
};

Outcome process(const fs::path& path, extract::Extractor& extractor, const extract::Settings& settings,
                const IngestArgs& args) {
  Outcome o;
  nlohmann::json base = source_fields(path);
  o.source = base["source"];
  const auto fail = [&](nlohmann::json j, const std::string& error) {
    o.error = error;
    j["status"] = "error";
    j["error"] = error;
    o.lines.push_back(dump_line(j));
    return o;
  };
  std::string reason;
  std::uint64_t size = 0;
  const auto fd = extract::open_input(path.string(), settings.options.max_file_bytes, size, reason);
  if (!fd) return fail(base, reason);
  auto r = extractor.extract(*fd, path.string());
  ::close(*fd);
  if (r.status != extract::Outcome::Status::ok) {
    nlohmann::json j = base;
    if (!r.sha256.empty()) j["sha256"] = r.sha256;
    if (!r.media_type.empty()) j["media_type"] = r.media_type;
    j["size"] = r.size ? r.size : size;
    return fail(j, r.reason);
  }
  if (!args.chunks) {
    o.lines.push_back(dump_line(document_record(path, r.extracted)));
    return o;
  }
  const Document& doc = r.extracted.doc;
  const EstimateTokenCounter counter;
  const ChunkOptions chunk_opts{args.chunk_tokens, args.chunk_overlap};
  for (const Chunk& c : chunk_document(doc, counter, chunk_opts)) {
    nlohmann::json j = base;
    j["sha256"] = doc.sha256;
    j["chunk"] = c.index;
    j["first_page"] = c.first_page;
    j["last_page"] = c.last_page;
    j["tokens"] = c.tokens;
    j["text"] = c.text;
    o.lines.push_back(dump_line(j));
  }
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
  extract::Settings settings;
  ExtractOptions& opts = settings.options;
  opts.pdf_password = args.pdf_password;
  opts.map_einvoices = !args.no_einvoice;
  opts.max_file_bytes = args.max_file_mb << 20;
  opts.max_text_bytes = args.max_text_mb << 20;
  opts.max_page_text_bytes = args.max_page_text_mb << 20;
  opts.max_content_bytes = args.max_content_mb << 20;
  opts.max_page_content_bytes = args.max_page_content_mb << 20;
  opts.max_attachment_bytes = args.max_attachment_mb << 20;
  opts.max_pages = static_cast<int>(args.max_pages);
  // The records carry text, not line boxes: skip poppler's second text pass per PDF page.
  opts.pdf_line_bboxes = false;
  settings.limits.timeout_s = args.extract_timeout;
  settings.limits.memory_mb = args.extract_memory_mb;
  settings.isolation = !args.no_isolation;

  // `jobs` threads extract at once, each with its own Extractor (its worker process lives as long
  // as the thread: PR_SET_PDEATHSIG); records are written in input order, so the output does not
  // depend on the number of jobs. A thread runs at most 2 x jobs inputs ahead of the writer.
  const std::vector<fs::path> inputs = expand_inputs(args.paths);
  const std::size_t jobs = std::max<std::size_t>(1, std::min(args.jobs, inputs.size()));
  const std::size_t window = 2 * jobs;
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::size_t, Outcome> ready;
  std::size_t next_to_take = 0, next_to_write = 0;
  bool abort = false;
  std::string setup_error;
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < jobs; ++t) {
    threads.emplace_back([&] {
      extract::Extractor extractor(settings);
      for (;;) {
        std::size_t i = 0;
        {
          std::unique_lock<std::mutex> lock(mu);
          cv.wait(lock, [&] { return abort || next_to_take >= inputs.size() || next_to_take < next_to_write + window; });
          if (abort || next_to_take >= inputs.size()) return;
          i = next_to_take++;
        }
        Outcome o;
        try {
          o = process(inputs[i], extractor, settings, args);
        } catch (const extract::WorkerStartError& e) {  // no document can be read: a setup error
          std::lock_guard<std::mutex> lock(mu);
          if (setup_error.empty()) setup_error = e.what();
          abort = true;
          cv.notify_all();
          return;
        }
        std::lock_guard<std::mutex> lock(mu);
        ready.emplace(i, std::move(o));
        cv.notify_all();
      }
    });
  }
  const auto stop = [&] {
    {
      std::lock_guard<std::mutex> lock(mu);
      abort = true;
    }
    cv.notify_all();
    for (auto& t : threads) t.join();
  };
  std::size_t ok = 0, failed = 0;
  while (next_to_write < inputs.size()) {
    Outcome o;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return abort || ready.count(next_to_write) > 0; });
      if (abort) break;
      o = std::move(ready.at(next_to_write));
      ready.erase(next_to_write);
      ++next_to_write;
    }
    cv.notify_all();
    if (o.error.empty()) {
      ++ok;
    } else {
      ++failed;
      spdlog::warn("{}: {}", o.source, o.error);
    }
    for (const std::string& line : o.lines) {
      if (std::fwrite(line.data(), 1, line.size(), out) != line.size()) {
        spdlog::error("cannot write the output: {}", std::strerror(errno));
        stop();
        return 1;
      }
    }
  }
  stop();
  if (!setup_error.empty()) {
    spdlog::error("{}", setup_error);
    return 1;
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
  const auto* g = "Limits (per document; a document past one becomes an error record and the others go on)";
  sub->add_option("--max-file-mb", args->max_file_mb, "Refuse inputs larger than this many MiB")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{4096}))
      ->capture_default_str()
      ->group(g);
  sub->add_flag("--no-isolation", args->no_isolation,
                "Extract in quarry's own threads instead of worker processes: no time or memory limit, and a parser "
                "crash ends the command [isolation on]")
      ->group(g);
  sub->add_option("--extract-timeout", args->extract_timeout, "Wall time per document, seconds (0: none)")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str()
      ->group(g);
  sub->add_option("--extract-memory-mb", args->extract_memory_mb, "Memory of an extraction worker, MiB (0: none)")
      ->capture_default_str()
      ->group(g);
  sub->add_option("--max-text-mb", args->max_text_mb, "Extracted text per document, MiB")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 20))
      ->capture_default_str()
      ->group(g);
  sub->add_option("--max-page-text-mb", args->max_page_text_mb, "Extracted text per page, MiB")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 20))
      ->capture_default_str()
      ->group(g);
  sub->add_option("--max-content-mb", args->max_content_mb,
                  "PDF content streams a document may decode (pages, forms, annotations), MiB")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 20))
      ->capture_default_str()
      ->group(g);
  sub->add_option("--max-page-content-mb", args->max_page_content_mb, "PDF content streams one page may decode, MiB")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 20))
      ->capture_default_str()
      ->group(g);
  sub->add_option("--max-attachment-mb", args->max_attachment_mb, "An embedded file's bytes as really inflated, MiB")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 20))
      ->capture_default_str()
      ->group(g);
  sub->add_option("--max-pages", args->max_pages, "Pages per document")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 20))
      ->capture_default_str()
      ->group(g);
  sub->callback([&ctx, args] {
    if (args->extract_memory_mb != 0 && args->extract_memory_mb < 128) {
      spdlog::error("--extract-memory-mb {} is too small for an extraction worker (at least 128, or 0 for none)",
                    args->extract_memory_mb);
      ctx.exit_code = 1;
      return;
    }
    if (args->chunk_overlap >= args->chunk_tokens) {
      spdlog::error("--chunk-overlap must be smaller than --chunk-tokens");
      ctx.exit_code = 1;
      return;
    }
    ctx.exit_code = run_ingest(*args);
  });
}

}  // namespace quarry::cli
