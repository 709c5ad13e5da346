// `quarry worker`: the stages of `quarry run` between a JetStream pull consumer (instead of discover)
// and the results stream (instead of write). See queue.hpp for the protocol.
//
//   fetch task -> [inline bytes to the scratch folder] -> InputMsg -> extract -> build -> engine -> validate
//     -> RecordMsg -> publish the record (acknowledged by the stream) -> ack the task
//
// Test hooks (environment, read once at start; for the queue's tests only): QUARRY_TEST_WORKER_EXIT_ON=TEXT
// makes the process exit at once (status 86, like a crash) when it is handed a task whose source
// contains TEXT; QUARRY_TEST_TASK_DELAY_MS=N holds every task N ms after it is delivered (so that a
// test can kill a worker while it holds tasks).
#include <openssl/evp.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "pipeline/queue/nats_client.hpp"
#include "pipeline/queue/queue.hpp"
#include "pipeline/run/records.hpp"
#include "pipeline/run/stages.hpp"

namespace quarry::queue {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::optional<std::string> base64_decode(const std::string& in) {
  if (in.size() % 4 != 0) return std::nullopt;
  std::string out(in.size() / 4 * 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(in.data()), static_cast<int>(in.size()));
  if (n < 0) return std::nullopt;
  std::size_t len = static_cast<std::size_t>(n);
  for (std::size_t i = in.size(); i > 0 && in[i - 1] == '=' && len > 0; --i) --len;  // padding decodes to zeros
  out.resize(len);
  return out;
}

/// A task between its delivery and its ack.
struct InFlight {
  MsgPtr msg;
  std::uint64_t seq = 0;
  std::string id;
  fs::path scratch;  ///< the folder of its inline bytes; empty when read by path
  Clock::time_point last_progress;
};

/// The tasks this worker holds, by record key (the source name). Shared by the source and sink threads.
class Holding {
 public:
  bool has(const std::string& key) {
    std::lock_guard<std::mutex> l(mu_);
    return tasks_.count(key) > 0;
  }
  std::size_t size() {
    std::lock_guard<std::mutex> l(mu_);
    return tasks_.size();
  }
  void add(const std::string& key, InFlight t) {
    std::lock_guard<std::mutex> l(mu_);
    tasks_.emplace(key, std::move(t));
  }
  std::optional<InFlight> take(const std::string& key) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = tasks_.find(key);
    if (it == tasks_.end()) return std::nullopt;
    InFlight t = std::move(it->second);
    tasks_.erase(it);
    return t;
  }
  /// Progress acks for the tasks not acked for `every_s`.
  void progress(double every_s) {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [k, t] : tasks_)
      if (since(t.last_progress) >= every_s) {
        natsMsg_InProgress(t.msg.get(), nullptr);
        t.last_progress = Clock::now();
      }
  }
  /// Gives every task back for immediate redelivery (a stopping worker).
  std::size_t nak_all() {
    std::lock_guard<std::mutex> l(mu_);
    const std::size_t n = tasks_.size();
    for (auto& [k, t] : tasks_) {
      natsMsg_Nak(t.msg.get(), nullptr);
      std::error_code ec;
      if (!t.scratch.empty()) fs::remove_all(t.scratch, ec);
    }
    tasks_.clear();
    return n;
  }

 private:
  std::mutex mu_;
  std::unordered_map<std::string, InFlight> tasks_;
};

struct TestHooks {
  std::string exit_on;
  int delay_ms = 0;
  static TestHooks from_env() {
    TestHooks h;
    if (const char* e = std::getenv("QUARRY_TEST_WORKER_EXIT_ON")) h.exit_on = e;
    if (const char* d = std::getenv("QUARRY_TEST_TASK_DELAY_MS")) h.delay_ms = std::atoi(d);
    return h;
  }
};

/// Connects, waiting for the server with a backoff of 1 s doubling to 30 s, until `control` stops.
std::unique_ptr<Connection> connect_with_backoff(const run::JobSpec& job, const JobNames& names, run::RunControl& control,
                                                 const std::function<void(const std::string&)>& log, JobAssets& assets) {
  double wait_s = 1;
  for (;;) {
    try {
      auto c = std::make_unique<Connection>(job.queue, "quarry worker " + job.queue.job, Connection::Reconnect::forever);
      assets = ensure_job(*c, job.queue, names);
      return c;
    } catch (const QueueError& e) {
      if (log) log(std::string("worker: ") + e.what() + "; retrying in " + std::to_string(static_cast<int>(wait_s)) + " s");
    }
    const auto until = Clock::now() + std::chrono::duration<double>(wait_s);
    while (Clock::now() < until) {
      if (control.stop_level.load() > 0) return nullptr;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    wait_s = std::min(30.0, wait_s * 2);
  }
}

}  // namespace

run::RunMetrics run_worker(const run::JobSpec& job, run::RunControl& control, const WorkerOptions& options) {
  check_queue_job(job);
  const auto names = job_names(job.queue.job);
  const auto log = [&](const std::string& s) {
    if (options.log) options.log(s);
  };
  std::string schema_text;
  {
    std::ifstream in(job.schema, std::ios::binary);
    if (!in) throw std::runtime_error(job.schema.string() + ": cannot open the schema");
    schema_text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const std::string my_schema = schema_id(schema_text);
  const auto hooks_env = TestHooks::from_env();

  JobAssets assets;
  auto conn = connect_with_backoff(job, names, control, options.log, assets);
  if (!conn) return {};
  if (!assets.differs.empty()) log("worker: warning: " + assets.differs);
  log("worker: connected to " + conn->url() + ", job " + job.queue.job + " (ack wait " +
      std::to_string(static_cast<int>(assets.ack_wait_s)) + " s, max deliveries " + std::to_string(assets.max_deliver) + ")");
  natsSubscription* sub = nullptr;
  {
    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Stream = names.tasks_stream.c_str();
    so.Consumer = names.workers_consumer.c_str();
    jsErrCode jerr = static_cast<jsErrCode>(0);
    const natsStatus s = js_PullSubscribe(&sub, conn->js(), names.tasks_subject.c_str(), names.workers_consumer.c_str(),
                                          nullptr, &so, &jerr);
    if (s != NATS_OK)
      throw QueueError("worker: cannot bind to consumer " + names.workers_consumer + " of " + names.tasks_stream + ": " +
                       status_text(s, jerr));
  }
  struct SubGuard {
    natsSubscription* s;
    ~SubGuard() { natsSubscription_Destroy(s); }
  } sub_guard{sub};

  Holding holding;
  std::atomic<std::size_t> redelivered{0};  // tasks delivered before (their worker died, hung or gave them back)
  // Progress acks every quarter of the ack wait (the sink looks every 0.1 s): well within it.
  const double progress_every_s = std::max(0.2, assets.ack_wait_s / 4);
  // Tasks held at once: what the stages can work on (a larger read-ahead leaves other workers idle at
  // the end of a job while this one still holds tasks).
  const std::size_t max_held = job.extract_threads + job.engine.max_inflight;
  const fs::path scratch_root = job.output / "tasks";

  run::StageHooks hooks;
  hooks.source = [&](run::stages::Shared& sh, zmq::socket_t& to_extract, zmq::context_t& zctx) {
    auto to_writer = run::stages::make_socket(zctx, zmq::socket_type::push, 16);
    to_writer.connect(run::stages::ep_write);
    auto last_task = Clock::now();
    auto last_complaint = Clock::now() - std::chrono::hours(1);
    while (sh.stop() == 0 && !sh.failed) {
      if (holding.size() >= max_held) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      natsMsgList list{};
      jsErrCode jerr = static_cast<jsErrCode>(0);
      // Up to what the stages can take now: one round trip for several tasks when they are quick.
      const int room = static_cast<int>(max_held - holding.size());
      const natsStatus s = natsSubscription_Fetch(&list, sub, std::max(1, room), 1000, &jerr);
      if (s == NATS_TIMEOUT && conn->connected()) {
        if (job.queue.idle_exit_s > 0 && holding.size() == 0 && since(last_task) >= job.queue.idle_exit_s) {
          log("worker: no task for " + std::to_string(static_cast<int>(job.queue.idle_exit_s)) + " s: exiting");
          int zero = 0;
          sh.control.stop_level.compare_exchange_strong(zero, 1);
        }
        continue;
      }
      if (s != NATS_OK) {
        if (since(last_complaint) > 10) {
          log("worker: cannot fetch tasks from " + conn->url() + " (" + status_text(s, jerr) + "); retrying");
          last_complaint = Clock::now();
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
        continue;
      }
      for (int i = 0; i < list.Count; ++i) {
        MsgPtr msg(list.Msgs[i]);
        list.Msgs[i] = nullptr;
        last_task = Clock::now();
        const Delivery d = delivery_of(msg.get());
        const auto t = json::parse(header(msg.get(), "Quarry-Task"), nullptr, false);
        if (t.is_discarded() || !t.is_object() || !t.contains("source") || !t["source"].is_string()) {
          log("worker: task " + std::to_string(d.stream_sequence) + " of " + names.tasks_stream +
              " is not a quarry task (no Quarry-Task header): dropped");
          natsMsg_Term(msg.get(), nullptr);
          continue;
        }
        // Tasks of this batch not handed to the stages go back at once (not after the ack wait).
        const auto give_back_rest = [&] {
          natsMsg_Nak(msg.get(), nullptr);
          for (int j = i + 1; j < list.Count; ++j) natsMsg_Nak(list.Msgs[j], nullptr);
        };
        const std::string schema = t.value("schema", "");
        if (schema != my_schema) {
          give_back_rest();
          sh.set_fatal("the tasks of job " + job.queue.job + " were submitted with schema " + schema + ", this worker has " +
                       job.schema.string() + " (" + my_schema + "): start the worker with the submit's --schema");
          break;
        }
        const std::string source = t["source"].get<std::string>();
        // Two tasks of one name (a file changed between two submits) are done one after the other.
        while (holding.has(source) && sh.stop() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        if (sh.stop() > 0) {
          give_back_rest();
          break;
        }
        run::Subject subject;
        subject.source = source;
        subject.source_b64 = t.value("source_base64", "");
        subject.sha256 = t.value("sha256", "");
        subject.key = run::record_key(source, "");
        InFlight f;
        f.seq = d.stream_sequence;
        f.id = task_id(subject.sha256, t.value("task", ""), schema, source);
        f.last_progress = Clock::now();
        if (d.delivered > 1) redelivered.fetch_add(1);
        if (assets.max_deliver > 0 && d.delivered >= assets.max_deliver) {
          // The last delivery: every earlier one ended without a record (the worker died or hung).
          f.msg = std::move(msg);
          holding.add(subject.key, std::move(f));
          run::send(to_writer, run::error_record(subject, nullptr, "crash",
                                                 "delivered " + std::to_string(d.delivered) +
                                                     " times without a result: the worker died or ran past the ack wait (" +
                                                     std::to_string(static_cast<int>(assets.ack_wait_s)) +
                                                     " s) on it each time; not tried again (max deliveries " +
                                                     std::to_string(assets.max_deliver) + ")"));
          sh.discovered.fetch_add(1);
          continue;
        }
        if (!hooks_env.exit_on.empty() && source.find(hooks_env.exit_on) != std::string::npos) std::_Exit(86);
        run::InputMsg in;
        in.source = source;
        in.source_b64 = subject.source_b64;
        in.problem = t.value("problem", "");
        std::string path = t.value("path", "");
        if (path.empty()) path = base64_decode(t.value("path_base64", "")).value_or("");
        if (in.problem.empty() && t.value("inline", false)) {
          // The bytes came with the task: a file of the same name (extractors look at the extension).
          f.scratch = scratch_root / std::to_string(d.stream_sequence);
          fs::create_directories(f.scratch);
          auto name = fs::path(path).filename();
          if (name.empty()) name = "document";
          const auto file = f.scratch / name;
          std::ofstream out(file, std::ios::binary | std::ios::trunc);
          out.write(natsMsg_GetData(msg.get()), natsMsg_GetDataLength(msg.get()));
          out.close();
          if (!out) in.problem = "cannot write the document to " + file.string();
          path = file.string();
        }
        in.path = path;
        f.msg = std::move(msg);
        holding.add(subject.key, std::move(f));
        if (hooks_env.delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(hooks_env.delay_ms));
        run::send(to_extract, in);
        sh.discovered.fetch_add(1);
      }
      natsMsgList_Destroy(&list);
    }
  };

  hooks.sink = [&](run::stages::Shared& sh, zmq::socket_t& in, run::RunMetrics& m) {
    in.set(zmq::sockopt::rcvtimeo, 100);
    const auto start = Clock::now();
    std::optional<Clock::time_point> stopped_at;
    auto last_progress_ack = Clock::now();
    auto last_report = Clock::now();
    const auto report = [&](bool force) {
      if (!options.on_progress || (!force && since(last_report) < 0.25)) return;
      last_report = Clock::now();
      run::Progress p;
      p.done = m.written;
      p.total = sh.discovered.load();
      p.written = m.written;
      p.ok = m.ok;
      p.invalid = m.invalid;
      p.error = m.error;
      p.elapsed_s = since(start);
      p.decode_tokens = m.decode_tokens;
      options.on_progress(p);
    };
    for (;;) {
      if (sh.failed) break;
      if (sh.stop() >= 1 && !stopped_at) stopped_at = Clock::now();
      if (stopped_at) {
        if (holding.size() <= m.cancelled) break;
        if (since(*stopped_at) >= sh.options.stop_grace_s) {
          int one = 1;
          sh.control.stop_level.compare_exchange_strong(one, 2);
        }
        if (since(*stopped_at) >= sh.options.stop_grace_s + 2) break;
      }
      if (since(last_progress_ack) >= 0.1) {
        holding.progress(progress_every_s);
        last_progress_ack = Clock::now();
      }
      auto msg = run::recv(in);
      if (!msg) {
        report(false);
        continue;
      }
      if (auto* n = std::get_if<run::NoticeMsg>(&*msg)) {
        if (n->kind == run::NoticeMsg::Kind::cancelled) m.cancelled += n->count;
        if (n->kind == run::NoticeMsg::Kind::retry) {
          ++m.retries;
          if (n->tokens) {
            ++m.model_requests;
            m.decode_tokens += n->tokens->decode;
          }
        }
        continue;
      }
      auto* r = std::get_if<run::RecordMsg>(&*msg);
      if (!r) throw std::runtime_error("worker: unexpected message");
      auto task = holding.take(r->key);
      if (!task) {
        log("worker: a record for " + r->key + " that no task asked for: dropped");
        continue;
      }
      json body = {{"task_seq", task->seq}, {"key", r->key}, {"tokens", nullptr}};
      if (r->tokens) {
        const auto& t = *r->tokens;
        body["tokens"] = {{"prompt", t.prompt}, {"prefill", t.prefill}, {"cached", t.cached},
                          {"decode", t.decode}, {"draft", t.draft},     {"accepted", t.accepted}};
      }
      body["record"] = r->record;
      const std::string payload = body.dump(-1, ' ', false, json::error_handler_t::replace);
      // The record first, acknowledged by the stream; only then the task's ack.
      bool published = false;
      auto last_complaint = Clock::now() - std::chrono::hours(1);
      while (!published && sh.stop() < 2 && !sh.failed) {
        try {
          publish(*conn, names.results_subject, task->id, {}, payload.data(), payload.size());
          published = true;
        } catch (const QueueError& e) {
          if (since(last_complaint) > 10) {
            log(std::string("worker: ") + e.what() + "; retrying");
            last_complaint = Clock::now();
          }
          holding.progress(progress_every_s);
          std::this_thread::sleep_for(std::chrono::milliseconds(250));
        }
      }
      std::error_code ec;
      if (!task->scratch.empty()) fs::remove_all(task->scratch, ec);
      if (!published) {
        natsMsg_Nak(task->msg.get(), nullptr);
        continue;
      }
      // A lost ack (the server restarting) only means a redelivery, whose record is then a duplicate.
      for (int attempt = 0; attempt < 3; ++attempt)
        if (natsMsg_AckSync(task->msg.get(), nullptr, nullptr) == NATS_OK) break;
      const std::string status = r->record.value("status", "");
      if (status == "ok") ++m.ok;
      else if (status == "invalid") ++m.invalid;
      else ++m.error;
      ++m.written;
      if (r->tokens) {
        ++m.model_requests;
        m.prompt_tokens += r->tokens->prompt;
        m.prefill_tokens += r->tokens->prefill;
        m.cached_tokens += r->tokens->cached;
        m.decode_tokens += r->tokens->decode;
        m.draft_tokens += r->tokens->draft;
        m.accepted_tokens += r->tokens->accepted;
      }
      report(false);
    }
    const auto given_back = holding.nak_all();
    if (given_back) log("worker: gave " + std::to_string(given_back) + " unfinished task(s) back to the queue");
    report(true);
  };

  run::RunOptions ro;
  ro.log = options.log;
  ro.hooks = &hooks;
  auto m = run::run_job(job, control, ro);
  log("worker: " + std::to_string(redelivered.load()) +
      " of the tasks had been delivered before (to a worker that died, ran past the ack wait or gave them back)");
  return m;
}

}  // namespace quarry::queue
