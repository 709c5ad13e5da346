// `quarry collect`: the results stream into OUTDIR through the ledger's commit protocol, exactly once.
#include <chrono>
#include <optional>
#include <thread>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "pipeline/queue/nats_client.hpp"
#include "pipeline/queue/queue.hpp"
#include "pipeline/run/ledger.hpp"
#include "pipeline/run/messages.hpp"
#include "pipeline/run/outdir.hpp"

namespace quarry::queue {

using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// Which task sequence numbers have their record, and the first one that has not.
class SeqSet {
 public:
  void add(std::uint64_t seq) {
    if (seq == 0) return;
    if (seq >= done_.size()) done_.resize(seq + 1024, false);
    done_[seq] = true;
    while (first_missing_ < done_.size() && done_[first_missing_]) ++first_missing_;
  }
  /// Tasks 1..n all have their record.
  bool all_up_to(std::uint64_t n) const { return first_missing_ > n; }
  std::uint64_t count_up_to(std::uint64_t n) const {
    std::uint64_t c = 0;
    for (std::uint64_t i = 1; i <= n && i < done_.size(); ++i) c += done_[i] ? 1 : 0;
    return c;
  }

 private:
  std::vector<bool> done_ = std::vector<bool>(1024, false);
  std::uint64_t first_missing_ = 1;
};

}  // namespace

run::RunMetrics collect(const run::JobSpec& job, run::RunControl& control, const run::RunOptions& options) {
  check_queue_job(job);
  const auto start = Clock::now();
  const auto names = job_names(job.queue.job);
  const auto log = [&](const std::string& s) {
    if (options.log) options.log(s);
  };
  run::RunMetrics m;
  std::optional<run::OutdirLock> own_lock;
  if (!options.lock) own_lock.emplace(job.output);
  run::Ledger ledger(job.output);
  m.recovery = ledger.recovery();
  if (m.recovery.recovered_lines || m.recovery.truncated_bytes || m.recovery.dropped_rows)
    log("ledger: recovered " + std::to_string(m.recovery.recovered_lines) + " record(s), cut " +
        std::to_string(m.recovery.truncated_bytes) + " torn byte(s), dropped " + std::to_string(m.recovery.dropped_rows) +
        " row(s)");

  Connection conn(job.queue, "quarry collect " + job.queue.job, Connection::Reconnect::bounded);
  ensure_job(conn, job.queue, names);
  // A fresh consumer from the stream's first message: a collect that resumes reads everything again and
  // the ledger skips what is done.
  js_DeleteConsumer(conn.js(), names.results_stream.c_str(), names.collect_consumer.c_str(), nullptr, nullptr);
  natsSubscription* sub = nullptr;
  {
    jsConsumerConfig cc;
    jsConsumerConfig_Init(&cc);
    cc.Durable = names.collect_consumer.c_str();
    cc.AckPolicy = js_AckExplicit;
    cc.DeliverPolicy = js_DeliverAll;
    cc.AckWait = static_cast<std::int64_t>(30) * 1000000000;
    cc.MaxAckPending = 100000;
    jsConsumerInfo* ci = nullptr;
    jsErrCode jerr = static_cast<jsErrCode>(0);
    natsStatus s = js_AddConsumer(&ci, conn.js(), names.results_stream.c_str(), &cc, nullptr, &jerr);
    if (s != NATS_OK)
      throw QueueError("cannot create consumer " + names.collect_consumer + " of " + names.results_stream + " on " +
                       conn.url() + ": " + status_text(s, jerr));
    jsConsumerInfo_Destroy(ci);
    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Stream = names.results_stream.c_str();
    so.Consumer = names.collect_consumer.c_str();
    s = js_PullSubscribe(&sub, conn.js(), names.results_subject.c_str(), names.collect_consumer.c_str(), nullptr, &so, &jerr);
    if (s != NATS_OK)
      throw QueueError("cannot read " + names.results_stream + " on " + conn.url() + ": " + status_text(s, jerr));
  }
  struct SubGuard {
    natsSubscription* s;
    ~SubGuard() { natsSubscription_Destroy(s); }
  } sub_guard{sub};

  SeqSet done;
  std::uint64_t expected = 0;  // tasks 1..expected must have their record (the largest summary)
  bool summary_seen = false;
  std::uint64_t tasks_so_far = 0;  // the tasks stream's last sequence, for the progress total before a summary
  std::unordered_set<std::string> written_now;  // key \n sha256 of records this collect committed
  auto last_report = Clock::now() - std::chrono::seconds(1);
  auto last_state = Clock::now() - std::chrono::seconds(10);
  Clock::time_point lost_since{};  // when the connection was lost; the epoch while it is up
  bool lost = false;
  const auto report = [&](bool force) {
    if (!options.on_progress || (!force && since(last_report) < 0.25)) return;
    last_report = Clock::now();
    run::Progress p;
    const std::uint64_t total = summary_seen ? expected : tasks_so_far;
    p.done = static_cast<std::size_t>(done.count_up_to(std::max(total, expected)));
    p.total = std::max<std::size_t>(p.done, static_cast<std::size_t>(total));
    p.total_known = summary_seen;
    p.written = m.written;
    p.ok = m.ok;
    p.invalid = m.invalid;
    p.error = m.error;
    p.skipped = m.skipped;
    p.elapsed_s = since(start);
    p.decode_tokens = m.decode_tokens;
    options.on_progress(p);
  };

  for (;;) {
    if (control.stop_level.load() > 0) {
      m.interrupted = true;
      break;
    }
    if (summary_seen && done.all_up_to(expected)) break;
    if (!summary_seen && since(last_state) >= 2) {
      last_state = Clock::now();
      try {
        tasks_so_far = tasks_state(conn, names).first;
      } catch (const QueueError&) {
      }
    }
    natsMsgList list{};
    jsErrCode jerr = static_cast<jsErrCode>(0);
    const natsStatus s = natsSubscription_Fetch(&list, sub, 256, 500, &jerr);
    if (s != NATS_OK || !conn.connected()) {
      if (conn.connected()) {
        lost = false;
      } else if (!lost) {
        lost = true;
        lost_since = Clock::now();
      }
      if (conn.closed() || (lost && since(lost_since) > job.queue.reconnect_s))
        throw QueueError("lost the NATS server at " + conn.url() + " (" + status_text(s, jerr) + ") for more than " +
                         std::to_string(static_cast<int>(job.queue.reconnect_s)) + " s; " + std::to_string(m.written) +
                         " record(s) of this collect are saved in " + job.output.string() +
                         ": run collect again to go on");
      if (s != NATS_TIMEOUT) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      report(false);
      if (s != NATS_OK) continue;
    }
    lost = false;
    // One group commit for the batch, then the acks (a crash in between redelivers: the ledger skips them).
    std::vector<run::PendingRecord> group;
    std::vector<std::uint64_t> seqs;
    std::vector<std::optional<run::TokenCounts>> tokens;
    std::vector<std::string> statuses;
    double extract_ms = 0;
    for (int i = 0; i < list.Count; ++i) {
      natsMsg* msg = list.Msgs[i];
      const std::string subject = natsMsg_GetSubject(msg);
      const std::string data(natsMsg_GetData(msg), static_cast<std::size_t>(natsMsg_GetDataLength(msg)));
      const auto body = json::parse(data, nullptr, false);
      if (subject == names.submitted_subject) {
        if (!body.is_discarded() && body.is_object()) {
          expected = std::max<std::uint64_t>(expected, body.value("tasks_last_seq", std::uint64_t{0}));
          summary_seen = true;
        }
        continue;
      }
      if (body.is_discarded() || !body.is_object() || !body.contains("record") || !body["record"].is_object()) {
        log("collect: message " + std::to_string(delivery_of(msg).stream_sequence) + " of " + names.results_stream +
            " is not a quarry record: skipped");
        continue;
      }
      const auto& rec = body["record"];
      const std::string key = body.value("key", rec.value("source", ""));
      const std::string sha = rec.value("sha256", "");
      seqs.push_back(body.value("task_seq", std::uint64_t{0}));
      const std::string dedupe = key + '\n' + sha;
      if (written_now.count(dedupe) || ledger.is_done(key, sha)) {
        ++m.skipped;  // its record is in OUTDIR already (an earlier collect, or published twice)
        continue;
      }
      written_now.insert(dedupe);
      run::PendingRecord p;
      p.source = key;
      p.sha256 = sha;
      p.status = rec.value("status", "");
      p.method = rec.contains("method") && rec["method"].is_string() ? rec["method"].get<std::string>() : "";
      p.attempts = rec.contains("stats") && rec["stats"].is_object() ? rec["stats"].value("attempts", std::size_t{0}) : 0;
      p.retryable = run::is_retryable_record(rec);
      p.line = rec.dump(-1, ' ', false, json::error_handler_t::replace);
      group.push_back(std::move(p));
      statuses.push_back(group.back().status);
      if (rec.contains("stats") && rec["stats"].is_object()) extract_ms += rec["stats"].value("extract_ms", 0.0);
      std::optional<run::TokenCounts> t;
      if (body.contains("tokens") && body["tokens"].is_object()) {
        const auto& j = body["tokens"];
        t = run::TokenCounts{j.value("prompt", std::uint64_t{0}), j.value("prefill", std::uint64_t{0}),
                             j.value("cached", std::uint64_t{0}), j.value("decode", std::uint64_t{0}),
                             j.value("draft", std::uint64_t{0}),  j.value("accepted", std::uint64_t{0})};
      }
      tokens.push_back(t);
    }
    const auto t0 = Clock::now();
    if (!group.empty()) ledger.commit(group);
    m.write_s += since(t0);
    m.extract_s += extract_ms / 1000;
    for (int i = 0; i < list.Count; ++i) natsMsg_Ack(list.Msgs[i], nullptr);
    natsMsgList_Destroy(&list);
    for (const auto seq : seqs) done.add(seq);
    for (std::size_t i = 0; i < group.size(); ++i) {
      if (statuses[i] == "ok") ++m.ok;
      else if (statuses[i] == "invalid") ++m.invalid;
      else ++m.error;
      if (group[i].retryable) ++m.retryable;
      ++m.written;
      if (const auto& t = tokens[i]) {
        ++m.model_requests;
        m.prompt_tokens += t->prompt;
        m.prefill_tokens += t->prefill;
        m.cached_tokens += t->cached;
        m.decode_tokens += t->decode;
        m.draft_tokens += t->draft;
        m.accepted_tokens += t->accepted;
      }
    }
    report(false);
  }
  report(true);
  natsConnection_Flush(conn.nc());  // the last acks
  m.discovered = static_cast<std::size_t>(expected);
  m.expected = m.discovered;
  m.wall_s = since(start);
  return m;
}

}  // namespace quarry::queue
