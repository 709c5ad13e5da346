// write: group commit (results.jsonl + fdatasync, then the ledger), counts, progress.
#include <algorithm>
#include <optional>

#include "pipeline/run/stages.hpp"

namespace quarry::run::stages {

namespace {

using json = nlohmann::ordered_json;

void add_tokens(RunMetrics& m, const std::optional<TokenCounts>& t) {
  if (!t) return;
  m.prompt_tokens += t->prompt;
  m.prefill_tokens += t->prefill;
  m.cached_tokens += t->cached;
  m.decode_tokens += t->decode;
  m.draft_tokens += t->draft;
  m.accepted_tokens += t->accepted;
  ++m.model_requests;
}

}  // namespace

void write_stage(Shared& sh, zmq::socket_t& in, Ledger& ledger, RunMetrics& m,
                 std::chrono::steady_clock::time_point start) {
  in.set(zmq::sockopt::rcvtimeo, 100);
  std::size_t handled = 0;
  auto last_progress = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  const auto report = [&](bool force) {
    if (!sh.options.on_progress) return;
    const auto now = std::chrono::steady_clock::now();
    if (!force && now - last_progress < std::chrono::milliseconds(250)) return;
    last_progress = now;
    Progress p;
    p.done = handled;
    p.total_known = sh.discover_done.load();
    p.total = std::max(handled, sh.discovered.load() * sh.units_per_doc);
    p.written = m.written;
    p.ok = m.ok;
    p.invalid = m.invalid;
    p.error = m.error;
    p.skipped = m.skipped;
    p.elapsed_s = seconds_since(start);
    p.decode_tokens = m.decode_tokens;
    sh.options.on_progress(p);
  };
  std::vector<PendingRecord> group;
  std::optional<std::chrono::steady_clock::time_point> stopped_at;
  for (;;) {
    if (sh.failed) return;
    // A stop gives the requests in flight stop_grace_s, then cancels them.
    if (sh.stop() >= 1 && !stopped_at) stopped_at = std::chrono::steady_clock::now();
    if (stopped_at && seconds_since(*stopped_at) >= sh.options.stop_grace_s) {
      int one = 1;
      sh.control.stop_level.compare_exchange_strong(one, 2);
    }
    const bool done_discovering = sh.discover_done.load();
    if (done_discovering && handled >= sh.discovered.load() * sh.units_per_doc) break;
    auto msg = recv(in);
    if (!msg) {
      report(false);
      continue;
    }
    group.clear();
    std::vector<RecordMsg> records;
    // Drain what is there (group commit: one fdatasync and one transaction for all of it).
    for (;;) {
      if (auto* r = std::get_if<RecordMsg>(&*msg)) {
        records.push_back(std::move(*r));
      } else if (auto* n = std::get_if<NoticeMsg>(&*msg)) {
        switch (n->kind) {
          case NoticeMsg::Kind::skipped:
            m.skipped += n->count;
            handled += n->count;
            break;
          case NoticeMsg::Kind::cancelled:
            m.cancelled += n->count;
            handled += n->count;
            break;
          case NoticeMsg::Kind::other_shard:
            m.other_shards += n->count;
            handled += n->count;
            break;
          case NoticeMsg::Kind::retry:
            ++m.retries;
            add_tokens(m, n->tokens);
            break;
        }
      } else {
        throw std::runtime_error("write: unexpected message");
      }
      if (records.size() >= 256) break;
      msg = recv(in, zmq::recv_flags::dontwait);
      if (!msg) break;
    }
    if (records.empty()) {
      report(false);
      continue;
    }
    const auto t0 = std::chrono::steady_clock::now();
    for (auto& r : records) {
      const auto& rec = r.record;
      PendingRecord p;
      p.source = r.key;
      p.sha256 = rec.value("sha256", "");
      p.status = rec.value("status", "");
      p.method = rec["method"].is_string() ? rec["method"].get<std::string>() : "";
      p.attempts = rec["stats"].value("attempts", std::size_t{0});
      p.retryable = is_retryable_record(rec);
      p.line = rec.dump(-1, ' ', false, json::error_handler_t::replace);
      group.push_back(std::move(p));
    }
    ledger.commit(group);
    sh.write_clock.add(seconds_since(t0));
    for (auto& r : records) {
      const std::string status = r.record.value("status", "");
      if (status == "ok") ++m.ok;
      else if (status == "invalid") ++m.invalid;
      else ++m.error;
      if (status == "error" && is_retryable_record(r.record)) ++m.retryable;
      ++m.written;
      ++handled;
      add_tokens(m, r.tokens);
    }
    report(false);
  }
  report(true);
}

}  // namespace quarry::run::stages
