// extract: file -> ExtractedMsg {text, pages, e-invoice JSON}; read and extraction errors become
// error records, documents already in the ledger become "skipped" notices.
#include <optional>

#include "extractors/extract.hpp"
#include "pipeline/run/stages.hpp"

namespace quarry::run::stages {

namespace {

using json = nlohmann::ordered_json;

/// Sends, for every unit of the document not yet in the ledger, an error record; "skipped" for the others.
void send_errors(Shared& sh, zmq::socket_t& to_writer, const Subject& doc, const std::vector<bool>& done,
                 const std::string& rule, const std::string& message) {
  for (std::size_t q = 0; q < sh.units_per_doc; ++q) {
    if (q < done.size() && done[q]) {
      send(to_writer, NoticeMsg{NoticeMsg::Kind::skipped, 1, std::nullopt});
      continue;
    }
    send(to_writer, error_record(sh.unit(doc, q), nullptr, rule, message));
  }
}

}  // namespace

void extract_stage(Shared& sh, zmq::socket_t in, zmq::context_t& zctx) {
  auto to_build = make_socket(zctx, zmq::socket_type::push, 4);
  to_build.connect(ep_build);
  auto to_writer = make_socket(zctx, zmq::socket_type::push, 16);
  to_writer.connect(ep_write);
  LedgerReader ledger(sh.job.output, sh.job.retry_errors);
  ExtractOptions opts;
  opts.pdf_line_bboxes = false;
  opts.pdf_password = sh.job.extract.pdf_password;
  for (;;) {
    auto m = recv(in);
    if (!m) continue;
    auto* input = std::get_if<InputMsg>(&*m);
    if (!input) throw std::runtime_error("extract: unexpected message");
    if (sh.stop() >= 1) {  // stopping: nothing new starts
      send(to_writer, NoticeMsg{NoticeMsg::Kind::cancelled, sh.units_per_doc, std::nullopt});
      continue;
    }
    Subject doc;
    doc.source = input->source;
    doc.source_b64 = input->source_b64;
    doc.key = doc.source;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      if (!input->problem.empty()) {  // a special file or a broken link: never opened
        std::vector<bool> done(sh.units_per_doc, false);
        for (std::size_t q = 0; q < sh.units_per_doc; ++q) done[q] = ledger.is_done(sh.unit(doc, q).key, "");
        send_errors(sh, to_writer, doc, done, "read", input->problem);
        continue;
      }
      auto bytes = read_file_bytes(input->path, opts);
      if (!bytes) {
        sh.extract_clock.add(seconds_since(t0));
        std::vector<bool> done(sh.units_per_doc, false);
        for (std::size_t q = 0; q < sh.units_per_doc; ++q) done[q] = ledger.is_done(sh.unit(doc, q).key, "");
        send_errors(sh, to_writer, doc, done, "read", bytes.error().reason);
        continue;
      }
      doc.sha256 = sha256_hex(*bytes);
      // Resume: keys already in the ledger are skipped (all of them: the document is not extracted).
      std::vector<bool> done(sh.units_per_doc, false);
      std::size_t n_done = 0;
      for (std::size_t q = 0; q < sh.units_per_doc; ++q) {
        done[q] = ledger.is_done(sh.unit(doc, q).key, doc.sha256);
        n_done += done[q];
      }
      if (n_done == sh.units_per_doc) {
        sh.extract_clock.add(seconds_since(t0));
        send(to_writer, NoticeMsg{NoticeMsg::Kind::skipped, n_done, std::nullopt});
        continue;
      }
      auto extracted = extract_bytes(*bytes, input->source, opts);
      bytes->clear();
      bytes->shrink_to_fit();
      doc.extract_ms = seconds_since(t0) * 1e3;
      sh.extract_clock.add(seconds_since(t0));
      if (!extracted) {
        send_errors(sh, to_writer, doc, done, "extract", extracted.error().reason);
        continue;
      }
      ExtractedMsg out;
      out.doc = doc;
      out.text = extracted->text();
      out.pages = extracted->pages.size();
      if (extracted->einvoice) {
        out.einvoice = json(*extracted->einvoice);
        out.einvoice_format = extracted->einvoice_format;
      }
      out.done = std::move(done);
      send(to_build, out);
    } catch (const zmq::error_t&) {
      throw;
    } catch (const std::exception& e) {
      // Never lose a document: an unexpected failure becomes its error record.
      send_errors(sh, to_writer, doc, {}, "internal", e.what());
    }
  }
}

}  // namespace quarry::run::stages
