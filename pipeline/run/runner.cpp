#include "pipeline/run/runner.hpp"

#include <glob.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>
#include <zmq.hpp>

#include "engine/runtime/engine.hpp"
#include "engine/tokenizer/tokenizer.hpp"
#include "extractors/extract.hpp"
#include "pipeline/run/engine_worker.hpp"
#include "pipeline/run/prompts.hpp"
#include "pipeline/rag/rag.hpp"
#include "schemas/validate.hpp"
#include "schemas/rules.hpp"

namespace quarry::run {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
namespace eng = quarry::engine;

namespace {

// ---------------------------------------------------------------------------------------------
// Messages: msgpack-encoded JSON objects (the same encoding would cross a tcp transport).

void send_json(zmq::socket_t& s, const json& j) {
  const auto bytes = json::to_msgpack(j);
  s.send(zmq::buffer(bytes), zmq::send_flags::none);
}

std::optional<json> recv_json(zmq::socket_t& s, zmq::recv_flags flags = zmq::recv_flags::none) {
  zmq::message_t m;
  if (!s.recv(m, flags)) return std::nullopt;
  return json::from_msgpack(static_cast<const std::uint8_t*>(m.data()),
                            static_cast<const std::uint8_t*>(m.data()) + m.size());
}

zmq::socket_t make_socket(zmq::context_t& ctx, zmq::socket_type type, int hwm) {
  zmq::socket_t s(ctx, type);
  s.set(zmq::sockopt::sndhwm, hwm);
  s.set(zmq::sockopt::rcvhwm, hwm);
  s.set(zmq::sockopt::linger, 0);
  return s;
}

/// `data` with object members in the order of the schema's "properties" (recursively through
/// properties and items; members the schema does not list keep their order, after the listed ones),
/// so that mapper records read like model records. Schemas with $ref are followed only where inline.
json order_like_schema(const json& data, const json& schema) {
  if (!schema.is_object()) return data;
  if (data.is_object() && schema.contains("properties") && schema["properties"].is_object()) {
    json out = json::object();
    const auto& props = schema["properties"];
    for (const auto& [k, sub] : props.items())
      if (data.contains(k)) out[k] = order_like_schema(data[k], sub);
    for (const auto& [k, v] : data.items())
      if (!props.contains(k)) out[k] = v;
    return out;
  }
  if (data.is_array() && schema.contains("items")) {
    json out = json::array();
    for (const auto& x : data) out.push_back(order_like_schema(x, schema["items"]));
    return out;
  }
  return data;
}

/// The same value as the (sorted-key) nlohmann::json the validators take.
nlohmann::json to_plain(const json& j) { return nlohmann::json::from_msgpack(json::to_msgpack(j)); }

bool is_term(const zmq::error_t& e) { return e.num() == ETERM; }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Accumulates busy seconds of one stage across threads.
class StageClock {
 public:
  void add(double s) { us_.fetch_add(static_cast<std::int64_t>(s * 1e6), std::memory_order_relaxed); }
  double seconds() const { return static_cast<double>(us_.load()) * 1e-6; }

 private:
  std::atomic<std::int64_t> us_{0};
};

/// Shared state of one run (owned by run_job; every stage thread gets a reference).
struct Shared {
  Shared(const JobSpec& j, RunControl& c, const RunOptions& o) : job(j), control(c), options(o) {}
  const JobSpec& job;
  RunControl& control;
  const RunOptions& options;
  std::size_t units_per_doc = 1;  ///< record keys per document (questions for rag)
  std::atomic<std::size_t> discovered{0};
  std::atomic<bool> discover_done{false};
  StageClock discover_clock, extract_clock, build_clock, engine_clock, validate_clock, write_clock;
  std::mutex fatal_mu;
  std::string fatal;
  std::atomic<bool> failed{false};

  void set_fatal(const std::string& what) {
    std::lock_guard<std::mutex> lock(fatal_mu);
    if (fatal.empty()) fatal = what;
    failed = true;
    control.stop_level = 2;
  }
  void log(const std::string& msg) const {
    if (options.log) options.log(msg);
  }
  int stop() const { return control.stop_level.load(); }
};

constexpr const char* ep_extract = "inproc://extract";
constexpr const char* ep_build = "inproc://build";
constexpr const char* ep_engine = "inproc://engine";
constexpr const char* ep_retry = "inproc://retry";
constexpr const char* ep_validate = "inproc://validate";
constexpr const char* ep_write = "inproc://write";

json error_entry(const std::string& pointer, const std::string& rule, const std::string& message) {
  return json{{"pointer", pointer}, {"rule", rule}, {"message", message}};
}

/// A finished record (to the writer). `base` carries key/source/sha256 (+ question fields).
json make_record(const json& base, const std::string& status, const json& method, const json& data, const json& errors,
                 const json& stats) {
  json rec = json::object();
  rec["source"] = base.value("source", "");
  rec["sha256"] = base.value("sha256", "");
  if (base.contains("question")) {
    rec["question_id"] = base["question_id"];
    rec["question"] = base["question"];
  }
  rec["status"] = status;
  rec["method"] = method;
  rec["data"] = data;
  rec["errors"] = errors;
  rec["stats"] = stats;
  json msg = {{"kind", "record"},
              {"key", base.value("key", base.value("source", ""))},
              {"record", std::move(rec)}};
  return msg;
}

/// stats of a record that no model produced.
json stats_without_model(const json& base, std::size_t attempts) {
  return json{{"prompt_tokens", 0},      {"prefill_tokens", 0},    {"cached_tokens", 0}, {"decode_tokens", 0},
              {"ttft_ms", nullptr},      {"decode_tok_s", nullptr}, {"attempts", attempts},
              {"extract_ms", base.value("extract_ms", 0.0)}};
}

std::string record_key(const std::string& source, const json& question) {
  if (question.is_null()) return source;
  return source + "#" + question.value("id", "");
}

/// A Document with the pages and lines of `text` (as Document::text() writes them: lines joined by
/// '\n', pages by '\f'), so that text() gives `text` back. What the rag library needs of a document.
Document document_from_text(const std::string& source, const std::string& text) {
  Document d;
  d.source = source;
  std::size_t start = 0;
  int number = 1;
  for (;;) {
    const auto end = text.find('\f', start);
    const std::string_view page = std::string_view(text).substr(start, end == std::string::npos ? std::string::npos : end - start);
    Page p;
    p.number = number++;
    std::size_t ls = 0;
    for (;;) {
      const auto le = page.find('\n', ls);
      p.lines.push_back(Line{std::string(page.substr(ls, le == std::string_view::npos ? std::string_view::npos : le - ls)), {}, 0});
      if (le == std::string_view::npos) break;
      ls = le + 1;
    }
    d.pages.push_back(std::move(p));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return d;
}

// ---------------------------------------------------------------------------------------------
// discover

bool has_glob_chars(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

class Discoverer {
 public:
  Discoverer(Shared& sh, zmq::socket_t& out, zmq::socket_t& to_writer, const fs::path& exclude)
      : sh_(sh), out_(out), to_writer_(to_writer) {
    std::error_code ec;
    exclude_ = fs::weakly_canonical(exclude, ec);
  }

  void run() {
    for (const auto& input : sh_.job.inputs) {
      if (stopped()) return;
      if (has_glob_chars(input) && !fs::exists(input)) {
        glob_t g{};
        const int rc = ::glob(input.c_str(), 0, nullptr, &g);
        if (rc == GLOB_NOMATCH) {
          sh_.log("discover: " + input + ": no file matches the pattern");
        } else if (rc == 0) {
          for (std::size_t i = 0; i < g.gl_pathc && !stopped(); ++i) visit(g.gl_pathv[i]);
        } else {
          sh_.log("discover: " + input + ": cannot expand the pattern");
        }
        globfree(&g);
      } else {
        visit(input);
      }
    }
  }

 private:
  Shared& sh_;
  zmq::socket_t& out_;
  zmq::socket_t& to_writer_;
  fs::path exclude_;
  std::set<std::string> seen_;

  bool stopped() const { return sh_.stop() > 0; }

  void visit(const fs::path& p) {
    std::error_code ec;
    const auto st = fs::status(p, ec);
    if (!ec && fs::is_directory(st)) {
      walk(p);
    } else {
      emit(p);
    }
  }

  bool excluded(const fs::path& p) const {
    if (exclude_.empty()) return false;
    std::error_code ec;
    const auto c = fs::weakly_canonical(p, ec);
    if (ec) return false;
    const auto rel = c.lexically_relative(exclude_);
    return !rel.empty() && *rel.begin() != "..";
  }

  void walk(const fs::path& dir) {
    if (excluded(dir)) return;
    std::vector<fs::path> entries;
    std::error_code ec;
    for (fs::directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end; !ec && it != end;
         it.increment(ec)) {
      const auto name = it->path().filename().string();
      if (!name.empty() && name[0] == '.') continue;
      entries.push_back(it->path());
    }
    if (ec) sh_.log("discover: " + dir.string() + ": " + ec.message());
    std::sort(entries.begin(), entries.end());
    for (const auto& e : entries) {
      if (stopped()) return;
      std::error_code ec2;
      const auto lst = fs::symlink_status(e, ec2);
      if (fs::is_directory(lst)) walk(e);            // real folders only: no symlink loops
      else if (fs::is_regular_file(fs::status(e, ec2))) emit(e);
    }
  }

  void emit(const fs::path& p) {
    if (excluded(p)) return;
    std::error_code ec;
    auto canon = fs::weakly_canonical(p, ec).string();
    if (ec) canon = p.string();
    if (!seen_.insert(canon).second) return;
    const auto t0 = std::chrono::steady_clock::now();
    json msg = {{"source", p.string()}};
    sh_.discover_clock.add(seconds_since(t0));
    send_json(out_, msg);
    sh_.discovered.fetch_add(1);
    (void)to_writer_;
  }
};

// ---------------------------------------------------------------------------------------------
// extract: file -> {source, sha256, text, einvoice, format, extract_ms}; errors and skips go to the writer.

void extract_worker(Shared& sh, zmq::socket_t in, zmq::context_t& zctx, const std::vector<json>& questions) {
  auto to_build = make_socket(zctx, zmq::socket_type::push, 4);
  to_build.connect(ep_build);
  auto to_writer = make_socket(zctx, zmq::socket_type::push, 16);
  to_writer.connect(ep_write);
  std::optional<LedgerReader> ledger;
  ledger.emplace(sh.job.output);
  ExtractOptions opts;
  opts.pdf_line_bboxes = false;
  try {
    for (;;) {
      auto msg = recv_json(in);
      if (!msg) continue;
      const std::string source = msg->value("source", "");
      if (sh.stop() >= 2) {
        send_json(to_writer, json{{"kind", "cancelled"}, {"count", sh.units_per_doc}});
        continue;
      }
      const auto t0 = std::chrono::steady_clock::now();
      json out;
      try {
        auto bytes = read_file_bytes(source, opts);
        if (!bytes) {
          const json base = {{"source", source}, {"sha256", ""}};
          sh.extract_clock.add(seconds_since(t0));
          for (std::size_t q = 0; q < sh.units_per_doc; ++q) {
            json b = base;
            const json question = questions.empty() ? json() : questions[q];
            if (!question.is_null()) {
              b["question_id"] = question["id"];
              b["question"] = question["question"];
            }
            b["key"] = record_key(source, question);
            if (ledger->is_done(b["key"].get<std::string>(), "")) {
              send_json(to_writer, json{{"kind", "skipped"}, {"count", 1}});
              continue;
            }
            send_json(to_writer, make_record(b, "error", nullptr, nullptr,
                                             json::array({error_entry("", "read", bytes.error().reason)}),
                                             stats_without_model(b, 0)));
          }
          continue;
        }
        const std::string sha = sha256_hex(*bytes);
        // Resume: keys already in the ledger are skipped (all of them: the document is not extracted).
        std::vector<bool> done(sh.units_per_doc, false);
        std::size_t n_done = 0;
        for (std::size_t q = 0; q < sh.units_per_doc; ++q) {
          const json question = questions.empty() ? json() : questions[q];
          done[q] = ledger->is_done(record_key(source, question), sha);
          n_done += done[q];
        }
        if (n_done == sh.units_per_doc) {
          sh.extract_clock.add(seconds_since(t0));
          send_json(to_writer, json{{"kind", "skipped"}, {"count", n_done}});
          continue;
        }
        auto doc = extract_bytes(*bytes, source, opts);
        bytes->clear();
        bytes->shrink_to_fit();
        const double extract_ms = seconds_since(t0) * 1e3;
        if (!doc) {
          sh.extract_clock.add(seconds_since(t0));
          for (std::size_t q = 0; q < sh.units_per_doc; ++q) {
            const json question = questions.empty() ? json() : questions[q];
            if (done[q]) {
              send_json(to_writer, json{{"kind", "skipped"}, {"count", 1}});
              continue;
            }
            json b = {{"source", source}, {"sha256", sha}, {"key", record_key(source, question)},
                      {"extract_ms", extract_ms}};
            if (!question.is_null()) {
              b["question_id"] = question["id"];
              b["question"] = question["question"];
            }
            send_json(to_writer, make_record(b, "error", nullptr, nullptr,
                                             json::array({error_entry("", "extract", doc.error().reason)}),
                                             stats_without_model(b, 0)));
          }
          continue;
        }
        out = {{"source", source},
               {"sha256", sha},
               {"text", doc->text()},
               {"extract_ms", extract_ms},
               {"pages", doc->pages.size()}};
        if (doc->einvoice) {
          out["einvoice"] = *doc->einvoice;
          out["einvoice_format"] = doc->einvoice_format;
        }
        json done_mask = json::array();
        for (bool d : done) done_mask.push_back(d);
        out["done"] = std::move(done_mask);
        sh.extract_clock.add(seconds_since(t0));
      } catch (const zmq::error_t&) {
        throw;
      } catch (const std::exception& e) {
        // Never lose a document: an unexpected failure becomes its error record.
        json b = {{"source", source}, {"sha256", ""}, {"key", record_key(source, questions.empty() ? json() : questions[0])}};
        for (std::size_t q = 0; q < sh.units_per_doc; ++q) {
          const json question = questions.empty() ? json() : questions[q];
          b["key"] = record_key(source, question);
          send_json(to_writer, make_record(b, "error", nullptr, nullptr,
                                           json::array({error_entry("", "internal", e.what())}),
                                           stats_without_model(b, 0)));
        }
        continue;
      }
      send_json(to_build, out);
    }
  } catch (const zmq::error_t& e) {
    if (!is_term(e)) sh.set_fatal(std::string("extract: ") + e.what());
  } catch (const std::exception& e) {
    sh.set_fatal(std::string("extract: ") + e.what());
  }
}

// ---------------------------------------------------------------------------------------------
// build task: document -> mapper record (to validate) or model request(s) (to the engine worker).

struct BuildContext {
  std::shared_ptr<const eng::Tokenizer> tokenizer;
  PromptTemplates prompts;
  std::size_t context_tokens = 0;  ///< model's max_position_embeddings
  std::vector<json> questions;     ///< rag: [{"id", "question"}]
  std::vector<rag::Question> rag_questions;
  rag::RagTemplate rag_template;
};

/// rag answers are short: the output budget of a question.
std::size_t rag_answer_tokens(const JobSpec& job) { return std::min<std::size_t>(job.engine.max_tokens, 512); }

constexpr std::size_t k_min_output_tokens = 256;

void build_stage(Shared& sh, zmq::socket_t in, zmq::context_t& zctx, const BuildContext& bc) {
  auto to_engine = make_socket(zctx, zmq::socket_type::push, 4);
  to_engine.connect(ep_engine);
  auto to_validate = make_socket(zctx, zmq::socket_type::push, 8);
  to_validate.connect(ep_validate);
  auto to_writer = make_socket(zctx, zmq::socket_type::push, 16);
  to_writer.connect(ep_write);
  try {
    for (;;) {
      auto doc = recv_json(in);
      if (!doc) continue;
      const std::string source = doc->value("source", "");
      if (sh.stop() >= 2) {
        send_json(to_writer, json{{"kind", "cancelled"}, {"count", sh.units_per_doc}});
        continue;
      }
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<json> tasks, mapped, records;
      std::size_t skipped = 0;
      try {
        const std::string text = (*doc)["text"].get<std::string>();
        json base = {{"source", source}, {"sha256", (*doc)["sha256"]}, {"extract_ms", (*doc)["extract_ms"]}};
        if (sh.job.task == Task::kie) {
          base["key"] = source;
          if (sh.job.prefer == Prefer::automatic && doc->contains("einvoice")) {
            json m = base;
            m["kind"] = "mapped";
            m["method"] = "einvoice-" + (*doc)["einvoice_format"].get<std::string>();
            m["data"] = (*doc)["einvoice"];
            mapped.push_back(std::move(m));
          } else {
            const auto msgs = bc.prompts.kie_messages(text);
            json t = base;
            t["prompt"] = bc.tokenizer->encode(bc.tokenizer->apply_chat_template(msgs, true, false));
            tasks.push_back(std::move(t));
          }
        } else {
          const auto& done = (*doc)["done"];
          const Document d = document_from_text(source, text);
          rag::RagPromptOptions ro;
          ro.context_tokens = bc.context_tokens;
          ro.max_answer_tokens = rag_answer_tokens(sh.job);
          const rag::TokenizerCounter counter(bc.tokenizer);
          const auto prompts = rag::build_rag_prompts(d, bc.rag_questions, bc.rag_template, counter, ro);
          for (std::size_t q = 0; q < bc.questions.size(); ++q) {
            if (done[q].get<bool>()) {
              ++skipped;
              continue;
            }
            const auto& question = bc.questions[q];
            json t = base;
            t["key"] = record_key(source, question);
            t["question_id"] = question["id"];
            t["question"] = question["question"];
            t["prompt"] = bc.tokenizer->encode(bc.tokenizer->apply_chat_template(prompts.prompts[q].messages, true, false));
            t["whole_document"] = prompts.prompts[q].whole_document;
            t["document_text"] = text;
            tasks.push_back(std::move(t));
          }
        }
        // Fit the context: prompt + output <= max_position_embeddings.
        for (auto& t : tasks) {
          const std::size_t n = t["prompt"].size();
          const std::size_t room = bc.context_tokens > n ? bc.context_tokens - n : 0;
          if (room < std::min<std::size_t>(k_min_output_tokens, sh.job.engine.max_tokens)) {
            json b = t;
            b.erase("prompt");
            json st = stats_without_model(b, 0);
            st["prompt_tokens"] = n;
            records.push_back(make_record(
                b, "error", "model", nullptr,
                json::array({error_entry("", "context",
                                         "the prompt is " + std::to_string(n) + " tokens; the model's context is " +
                                             std::to_string(bc.context_tokens) + " tokens, too little room for the output")}),
                st));
            t = nullptr;
            continue;
          }
          t["max_tokens"] = std::min(room, sh.job.task == Task::rag ? rag_answer_tokens(sh.job) : sh.job.engine.max_tokens);
          t["attempt"] = 0;
        }
      } catch (const std::exception& e) {
        json b = {{"source", source}, {"sha256", doc->value("sha256", "")}, {"key", source}};
        tasks.clear();
        mapped.clear();
        records.clear();
        records.push_back(make_record(b, "error", nullptr, nullptr, json::array({error_entry("", "internal", e.what())}),
                                      stats_without_model(b, 0)));
      }
      sh.build_clock.add(seconds_since(t0));
      if (skipped) send_json(to_writer, json{{"kind", "skipped"}, {"count", skipped}});
      for (auto& r : records) send_json(to_writer, r);
      for (auto& m : mapped) send_json(to_validate, m);
      for (auto& t : tasks)
        if (!t.is_null()) send_json(to_engine, t);
    }
  } catch (const zmq::error_t& e) {
    if (!is_term(e)) sh.set_fatal(std::string("build: ") + e.what());
  } catch (const std::exception& e) {
    sh.set_fatal(std::string("build: ") + e.what());
  }
}

// ---------------------------------------------------------------------------------------------
// engine worker: keeps up to max_inflight requests in flight; results go to validate.

void engine_stage(Shared& sh, zmq::socket_t tasks_in, zmq::socket_t retry_in, zmq::context_t& zctx,
                  EngineWorker& worker) {
  auto to_validate = make_socket(zctx, zmq::socket_type::push, 8);
  to_validate.connect(ep_validate);
  auto to_writer = make_socket(zctx, zmq::socket_type::push, 16);
  to_writer.connect(ep_write);
  const std::size_t max_inflight = sh.job.engine.max_inflight;
  try {
    for (;;) {
      // Admit: block only while nothing is in flight; retries first (they are older documents).
      bool cancel_sent = false;
      while (worker.in_flight() < max_inflight) {
        const bool idle = worker.in_flight() == 0;
        zmq::pollitem_t items[] = {{static_cast<void*>(retry_in), 0, ZMQ_POLLIN, 0},
                                   {static_cast<void*>(tasks_in), 0, ZMQ_POLLIN, 0}};
        zmq::poll(items, 2, std::chrono::milliseconds(idle ? 100 : 0));
        std::optional<json> t;
        if (items[0].revents & ZMQ_POLLIN) t = recv_json(retry_in, zmq::recv_flags::dontwait);
        else if (items[1].revents & ZMQ_POLLIN) t = recv_json(tasks_in, zmq::recv_flags::dontwait);
        if (!t) {
          if (idle) continue;  // keep waiting for work
          break;
        }
        if (sh.stop() >= 2) {
          send_json(to_writer, json{{"kind", "cancelled"}, {"count", 1}});
          cancel_sent = true;
          continue;
        }
        worker.submit(std::move(*t));
      }
      (void)cancel_sent;
      if (sh.stop() >= 2) {
        for (std::size_t n = worker.cancel_all(); n > 0; --n) send_json(to_writer, json{{"kind", "cancelled"}, {"count", 1}});
        continue;
      }
      const auto t0 = std::chrono::steady_clock::now();
      auto finished = worker.step();
      sh.engine_clock.add(seconds_since(t0));
      for (auto& f : finished) send_json(to_validate, f);
    }
  } catch (const zmq::error_t& e) {
    if (!is_term(e)) sh.set_fatal(std::string("engine: ") + e.what());
  } catch (const std::exception& e) {
    sh.set_fatal(std::string("engine: ") + e.what());
  }
}

// ---------------------------------------------------------------------------------------------
// validate: schema + business rules; retry policy; the record.

void validate_stage(Shared& sh, zmq::socket_t in, zmq::context_t& zctx, const schemas::Validator& validator,
                    const json& schema_ordered) {
  auto to_writer = make_socket(zctx, zmq::socket_type::push, 16);
  to_writer.connect(ep_write);
  auto to_retry = make_socket(zctx, zmq::socket_type::push, 0);  // unbounded: never blocks (no cycle)
  to_retry.connect(ep_retry);
  const std::size_t retries = sh.job.retries;
  try {
    for (;;) {
      auto m = recv_json(in);
      if (!m) continue;
      const auto t0 = std::chrono::steady_clock::now();
      json out;
      bool retry = false;
      try {
        const std::string kind = m->value("kind", "");
        json errors = json::array();
        if (kind == "mapped") {
          (*m)["data"] = order_like_schema((*m)["data"], schema_ordered);
          for (const auto& v : validator.validate(to_plain((*m)["data"])))
            errors.push_back(error_entry(v.pointer, v.keyword, v.message));
          out = make_record(*m, errors.empty() ? "ok" : "invalid", (*m)["method"], (*m)["data"], errors,
                            stats_without_model(*m, 0));
        } else {  // "generated"
          const std::size_t attempt = m->value("attempt", std::size_t{0});
          json stats = (*m)["stats"];
          stats["attempts"] = attempt + 1;
          stats["extract_ms"] = m->value("extract_ms", 0.0);
          if (m->contains("error") && !(*m)["error"].get<std::string>().empty()) {
            json b = *m;
            out = make_record(b, "error", "model", nullptr,
                              json::array({error_entry("", "engine", (*m)["error"].get<std::string>())}), stats);
          } else {
            const std::string text = (*m)["text"].get<std::string>();
            json data = json::parse(text, nullptr, false);
            if (data.is_discarded()) {
              data = nullptr;
              errors.push_back(error_entry("", "json",
                                           std::string("the model output is not complete JSON (finish: ") +
                                               m->value("finish", "?") + ", " + std::to_string(text.size()) + " bytes)"));
            } else {
              for (const auto& v : validator.validate(to_plain(data)))
                errors.push_back(error_entry(v.pointer, v.keyword, v.message));
              if (sh.job.task == Task::rag && m->contains("document_text")) {
                const Document d = document_from_text(m->value("source", ""), (*m)["document_text"].get<std::string>());
                for (const auto& v : rag::check_evidence(to_plain(data), d))
                  errors.push_back(error_entry(v.pointer, v.keyword, v.message));
              }
            }
            // Retry with another seed and temperature, unless the output was cut at max_tokens: that
            // is a length problem, which resampling does not solve.
            if (!errors.empty() && attempt < retries && sh.stop() < 2 && m->value("finish", "") != "length") {
              json t = *m;
              for (const char* k : {"kind", "text", "finish", "stats", "error"}) t.erase(k);
              t["attempt"] = attempt + 1;
              retry = true;
              out = std::move(t);
            } else {
              out = make_record(*m, errors.empty() ? "ok" : "invalid", "model", data, errors, stats);
            }
          }
          // Token totals for the run's throughput (every attempt counts).
          out["tokens"] = {{"prompt", stats.value("prompt_tokens", 0)},
                           {"prefill", stats.value("prefill_tokens", 0)},
                           {"cached", stats.value("cached_tokens", 0)},
                           {"decode", stats.value("decode_tokens", 0)},
                           {"draft", stats.value("draft_tokens", 0)},
                           {"accepted", stats.value("accepted_tokens", 0)}};
        }
      } catch (const std::exception& e) {
        json b = *m;
        out = make_record(b, "error", m->value("kind", "") == "mapped" ? (*m)["method"] : json("model"), nullptr,
                          json::array({error_entry("", "internal", e.what())}), stats_without_model(b, 0));
        retry = false;
      }
      sh.validate_clock.add(seconds_since(t0));
      if (retry) {
        json note = {{"kind", "retry"}, {"tokens", out.contains("tokens") ? out["tokens"] : json()}};
        send_json(to_writer, note);
        out.erase("tokens");
        send_json(to_retry, out);
      } else {
        send_json(to_writer, out);
      }
    }
  } catch (const zmq::error_t& e) {
    if (!is_term(e)) sh.set_fatal(std::string("validate: ") + e.what());
  } catch (const std::exception& e) {
    sh.set_fatal(std::string("validate: ") + e.what());
  }
}

// ---------------------------------------------------------------------------------------------
// write: group commit (results.jsonl + fdatasync, then the ledger), counts, progress.

void add_tokens(RunMetrics& m, const json& t) {
  if (!t.is_object()) return;
  m.prompt_tokens += t.value("prompt", std::uint64_t{0});
  m.prefill_tokens += t.value("prefill", std::uint64_t{0});
  m.cached_tokens += t.value("cached", std::uint64_t{0});
  m.decode_tokens += t.value("decode", std::uint64_t{0});
  m.draft_tokens += t.value("draft", std::uint64_t{0});
  m.accepted_tokens += t.value("accepted", std::uint64_t{0});
  ++m.model_requests;
}

void writer_loop(Shared& sh, zmq::socket_t& in, Ledger& ledger, RunMetrics& m,
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
  for (;;) {
    if (sh.failed) return;
    const bool done_discovering = sh.discover_done.load();
    if (done_discovering && handled >= sh.discovered.load() * sh.units_per_doc) break;
    auto msg = recv_json(in);
    if (!msg) {
      report(false);
      continue;
    }
    group.clear();
    std::vector<json> records;
    // Drain what is there (group commit: one fdatasync and one transaction for all of it).
    for (;;) {
      const std::string kind = msg->value("kind", "");
      if (kind == "record") {
        records.push_back(std::move(*msg));
      } else if (kind == "skipped") {
        const std::size_t n = msg->value("count", std::size_t{1});
        m.skipped += n;
        handled += n;
      } else if (kind == "cancelled") {
        const std::size_t n = msg->value("count", std::size_t{1});
        m.cancelled += n;
        handled += n;
      } else if (kind == "retry") {
        ++m.retries;
        add_tokens(m, (*msg)["tokens"]);
      }
      if (records.size() >= 256) break;
      msg = recv_json(in, zmq::recv_flags::dontwait);
      if (!msg) break;
    }
    if (records.empty()) {
      report(false);
      continue;
    }
    const auto t0 = std::chrono::steady_clock::now();
    for (auto& r : records) {
      const auto& rec = r["record"];
      PendingRecord p;
      p.source = r.value("key", rec.value("source", ""));
      p.sha256 = rec.value("sha256", "");
      p.status = rec.value("status", "");
      p.method = rec["method"].is_string() ? rec["method"].get<std::string>() : "";
      p.attempts = rec["stats"].value("attempts", std::size_t{0});
      p.line = rec.dump(-1, ' ', false, json::error_handler_t::replace);
      group.push_back(std::move(p));
    }
    ledger.commit(group);
    sh.write_clock.add(seconds_since(t0));
    for (auto& r : records) {
      const std::string status = r["record"].value("status", "");
      if (status == "ok") ++m.ok;
      else if (status == "invalid") ++m.invalid;
      else ++m.error;
      ++m.written;
      ++handled;
      if (r.contains("tokens")) add_tokens(m, r["tokens"]);
    }
    report(false);
  }
  report(true);
}

/// Runs a stage's body on its thread: nothing escapes it (a socket created after the run ended
/// throws ETERM, which is a normal end; anything else fails the run).
template <class F>
void guarded(Shared& sh, const char* stage, F&& body) {
  try {
    body();
  } catch (const zmq::error_t& e) {
    if (!is_term(e)) sh.set_fatal(std::string(stage) + ": " + e.what());
  } catch (const std::exception& e) {
    sh.set_fatal(std::string(stage) + ": " + e.what());
  } catch (...) {
    sh.set_fatal(std::string(stage) + ": unknown error");
  }
}

}  // namespace

RunMetrics run_job(const JobSpec& job_in, RunControl& control, const RunOptions& options) {
  JobSpec job = job_in;
  resolve_defaults(job);
  const auto start = std::chrono::steady_clock::now();
  RunMetrics metrics;
  Shared sh(job, control, options);
  const auto log = [&](const std::string& s) { sh.log(s); };

  // Setup (errors here are the run's errors, not a document's). OUTDIR is locked before anything in
  // it is opened: the ledger's repair must never cut another run's lines.
  std::optional<OutdirLock> own_lock;
  if (!options.lock) own_lock.emplace(job.output);
  Ledger ledger(job.output);
  metrics.recovery = ledger.recovery();
  if (metrics.recovery.recovered_lines || metrics.recovery.truncated_bytes || metrics.recovery.dropped_rows)
    log("ledger: recovered " + std::to_string(metrics.recovery.recovered_lines) + " record(s) written before a stop, cut " +
        std::to_string(metrics.recovery.truncated_bytes) + " byte(s) of a torn last line, dropped " +
        std::to_string(metrics.recovery.dropped_rows) + " row(s) past the end of results.jsonl");
  if (metrics.recovery.ledger_rows)
    log("resuming: " + std::to_string(metrics.recovery.ledger_rows) + " record(s) already in " +
        (job.output / Ledger::results_name).string());

  json schema_json;
  std::string schema_text;
  {
    std::ifstream in(job.schema, std::ios::binary);
    if (!in) throw std::runtime_error(job.schema.string() + ": cannot open the schema");
    schema_text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    schema_json = json::parse(schema_text, nullptr, false);
    if (schema_json.is_discarded()) throw std::runtime_error(job.schema.string() + ": malformed JSON");
  }
  schemas::Validator validator(schema_json, job.schema.filename().string());
  if (schema_json.value("$id", "") == "https://quarry.invalid/schemas/invoice.schema.json") add_invoice_rules(validator);

  BuildContext bc;
  bc.prompts = PromptTemplates::load(job.prompts);
  if (job.task == Task::rag) {
    auto qs = rag::read_questions(job.questions);
    if (!qs) throw std::runtime_error(qs.error().message());
    bc.rag_questions = std::move(*qs);
    for (const auto& q : bc.rag_questions) bc.questions.push_back(json{{"id", q.id}, {"question", q.text}});
    bc.rag_template = rag::load_rag_template(job.prompts);
    sh.units_per_doc = bc.questions.size();
  }
  bc.tokenizer = eng::Tokenizer::from_dir(job.model);
  EngineWorker worker(job, bc.tokenizer, schema_text, log);
  bc.context_tokens = worker.context_tokens();

  zmq::context_t zctx;
  // Receiving ends are bound here, before the stage threads start (then handed over to them).
  auto discover_out = make_socket(zctx, zmq::socket_type::push, 2);
  discover_out.bind(ep_extract);
  std::vector<zmq::socket_t> extract_in;
  for (std::size_t i = 0; i < job.extract_threads; ++i) {
    extract_in.push_back(make_socket(zctx, zmq::socket_type::pull, 1));
    extract_in.back().connect(ep_extract);
  }
  auto build_in = make_socket(zctx, zmq::socket_type::pull, 4);
  build_in.bind(ep_build);
  auto engine_in = make_socket(zctx, zmq::socket_type::pull, 4);
  engine_in.bind(ep_engine);
  auto retry_in = make_socket(zctx, zmq::socket_type::pull, 0);
  retry_in.bind(ep_retry);
  auto validate_in = make_socket(zctx, zmq::socket_type::pull, 8);
  validate_in.bind(ep_validate);
  auto writer_in = make_socket(zctx, zmq::socket_type::pull, 64);
  writer_in.bind(ep_write);
  auto discover_writer = make_socket(zctx, zmq::socket_type::push, 16);
  discover_writer.connect(ep_write);

  std::vector<std::thread> threads;
  const auto& questions = bc.questions;
  for (auto& s : extract_in)
    threads.emplace_back([&sh, &zctx, &questions, sock = std::move(s)]() mutable {
      guarded(sh, "extract", [&] { extract_worker(sh, std::move(sock), zctx, questions); });
    });
  threads.emplace_back([&sh, &zctx, &bc, sock = std::move(build_in)]() mutable {
    guarded(sh, "build", [&] { build_stage(sh, std::move(sock), zctx, bc); });
  });
  threads.emplace_back([&sh, &zctx, &worker, a = std::move(engine_in), b = std::move(retry_in)]() mutable {
    guarded(sh, "engine", [&] { engine_stage(sh, std::move(a), std::move(b), zctx, worker); });
  });
  const json schema_ordered = json::parse(schema_text);
  threads.emplace_back([&sh, &zctx, &validator, &schema_ordered, sock = std::move(validate_in)]() mutable {
    guarded(sh, "validate", [&] { validate_stage(sh, std::move(sock), zctx, validator, schema_ordered); });
  });
  std::thread discover_thread([&] {
    guarded(sh, "discover", [&] {
      Discoverer d(sh, discover_out, discover_writer, job.output);
      d.run();
    });
    sh.discover_done = true;
  });

  try {
    writer_loop(sh, writer_in, ledger, metrics, start);
  } catch (const std::exception& e) {
    sh.set_fatal(std::string("write: ") + e.what());
  }
  // Everything is accounted for (or the run failed): stop the stages.
  zctx.shutdown();
  discover_thread.join();
  for (auto& t : threads) t.join();
  discover_out.close();
  discover_writer.close();
  writer_in.close();
  zctx.close();

  metrics.wall_s = seconds_since(start);
  metrics.discovered = sh.discovered.load();
  metrics.expected = metrics.discovered * sh.units_per_doc;
  metrics.discover_s = sh.discover_clock.seconds();
  metrics.extract_s = sh.extract_clock.seconds();
  metrics.build_s = sh.build_clock.seconds();
  metrics.engine_s = sh.engine_clock.seconds();
  metrics.validate_s = sh.validate_clock.seconds();
  metrics.write_s = sh.write_clock.seconds();
  metrics.interrupted = control.stop_level.load() > 0 && !sh.failed;
  if (sh.failed) throw std::runtime_error(sh.fatal);
  return metrics;
}

}  // namespace quarry::run
