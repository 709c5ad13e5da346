// extract: file -> ExtractedMsg {text, pages, e-invoice JSON}. The file is opened here (never a
// special file, never past the size limit), hashed for the ledger's resume check, and extracted by this
// thread's Extractor: a worker process with the per-document time and memory limits
// (pipeline/extract/extractor.hpp). Read, extraction, limit and crash errors become error records
// (rules "read", "extract", "limit", "crash"); documents already in the ledger become "skipped" notices.
#include <unistd.h>

#include <algorithm>
#include <optional>

#include "pipeline/extract/extractor.hpp"
#include "pipeline/extract/input_file.hpp"
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

/// Closes a descriptor on scope exit.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

extract::Settings extract_settings(const JobSpec& job) {
  extract::Settings s;
  const auto& x = job.extract;
  s.options.pdf_line_bboxes = false;  // records carry text, not line boxes: skip poppler's second pass
  s.options.pdf_password = x.pdf_password;
  s.options.max_file_bytes = x.max_file_mb << 20;
  s.options.max_text_bytes = x.max_text_mb << 20;
  s.options.max_page_text_bytes = x.max_page_text_mb << 20;
  s.options.max_content_bytes = x.max_content_mb << 20;
  s.options.max_page_content_bytes = x.max_page_content_mb << 20;
  s.options.max_attachment_bytes = x.max_attachment_mb << 20;
  s.options.max_pages = static_cast<int>(x.max_pages);
  s.limits.timeout_s = x.timeout_s;
  s.limits.memory_mb = x.memory_mb;
  s.isolation = x.isolation;
  return s;
}

void extract_stage(Shared& sh, zmq::socket_t in, zmq::context_t& zctx) {
  auto to_build = make_socket(zctx, zmq::socket_type::push, 4);
  to_build.connect(ep_build);
  auto to_writer = make_socket(zctx, zmq::socket_type::push, 16);
  to_writer.connect(ep_write);
  LedgerReader ledger(sh.job.output, sh.job.retry_errors);
  const auto settings = extract_settings(sh.job);
  extract::Extractor extractor(settings);
  const auto stopping = [&sh] { return sh.stop() >= 1; };
  for (;;) {
    auto m = recv(in);
    if (!m) continue;
    auto* input = std::get_if<InputMsg>(&*m);
    if (!input) throw std::runtime_error("extract: unexpected message");
    if (stopping()) {  // nothing new starts
      send(to_writer, NoticeMsg{NoticeMsg::Kind::cancelled, sh.units_per_doc, std::nullopt});
      continue;
    }
    Subject doc;
    doc.source = input->source;
    doc.source_b64 = input->source_b64;
    doc.key = doc.source;
    const auto t0 = std::chrono::steady_clock::now();
    const auto done_for = [&](const std::string& sha) {
      std::vector<bool> done(sh.units_per_doc, false);
      for (std::size_t q = 0; q < sh.units_per_doc; ++q) done[q] = ledger.is_done(sh.unit(doc, q).key, sha);
      return done;
    };
    try {
      std::string reason;
      std::uint64_t size = 0;
      const std::optional<int> fd =
          input->problem.empty() ? extract::open_input(input->path, settings.options.max_file_bytes, size, reason)
                                 : std::nullopt;
      // Sharding: a document of another shard is that shard's run's (by its bytes' sha256, or by its
      // name when it cannot be read).
      const auto other_shard = [&](const std::string& sha) {
        if (sh.job.shard_count <= 1 || shard_of(sha, input->source, sh.job.shard_count) == sh.job.shard_index)
          return false;
        sh.extract_clock.add(seconds_since(t0));
        send(to_writer, NoticeMsg{NoticeMsg::Kind::other_shard, sh.units_per_doc, std::nullopt});
        return true;
      };
      if (!fd) {  // a special file or a broken link (never opened), or one that cannot be opened
        if (other_shard("")) continue;
        sh.extract_clock.add(seconds_since(t0));
        send_errors(sh, to_writer, doc, done_for(""), "read", input->problem.empty() ? reason : input->problem);
        continue;
      }
      FdGuard guard{*fd};
      const auto sha = extract::sha256_of_fd(*fd, reason);
      if (!sha) {
        if (other_shard("")) continue;
        sh.extract_clock.add(seconds_since(t0));
        send_errors(sh, to_writer, doc, done_for(""), "read", reason);
        continue;
      }
      if (other_shard(*sha)) continue;
      doc.sha256 = *sha;
      // Resume: keys already in the ledger are skipped (all of them: the document is not extracted).
      auto done = done_for(doc.sha256);
      const auto n_done = static_cast<std::size_t>(std::count(done.begin(), done.end(), true));
      if (n_done == sh.units_per_doc) {
        sh.extract_clock.add(seconds_since(t0));
        send(to_writer, NoticeMsg{NoticeMsg::Kind::skipped, n_done, std::nullopt});
        continue;
      }
      auto outcome = extractor.extract(*fd, input->source, stopping);
      doc.extract_ms = seconds_since(t0) * 1e3;
      sh.extract_clock.add(seconds_since(t0));
      if (outcome.status == extract::Outcome::Status::cancelled) {
        if (n_done) send(to_writer, NoticeMsg{NoticeMsg::Kind::skipped, n_done, std::nullopt});
        send(to_writer, NoticeMsg{NoticeMsg::Kind::cancelled, sh.units_per_doc - n_done, std::nullopt});
        continue;
      }
      if (!outcome.sha256.empty()) doc.sha256 = outcome.sha256;  // the bytes the worker really read
      if (outcome.status == extract::Outcome::Status::failed) {
        send_errors(sh, to_writer, doc, done, outcome.rule, outcome.reason);
        continue;
      }
      const Document& d = outcome.extracted.doc;
      ExtractedMsg out;
      out.doc = doc;
      out.text = d.text();
      out.pages = d.pages.size();
      if (d.einvoice) {
        out.einvoice = json(*d.einvoice);
        out.einvoice_format = d.einvoice_format;
      }
      out.done = std::move(done);
      send(to_build, out);
    } catch (const zmq::error_t&) {
      throw;
    } catch (const extract::WorkerStartError&) {
      throw;  // the run's problem, not the document's
    } catch (const std::exception& e) {
      // Never lose a document: an unexpected failure becomes its error record.
      send_errors(sh, to_writer, doc, {}, "internal", e.what());
    }
  }
}

}  // namespace quarry::run::stages
