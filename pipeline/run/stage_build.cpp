// build task: document -> mapper record (to validate) or model request(s) (to the engine worker).
#include <algorithm>
#include <unordered_map>

#include "pipeline/openai/batch_format.hpp"
#include "pipeline/run/batch.hpp"
#include "pipeline/run/chunked.hpp"
#include "pipeline/run/stages.hpp"

namespace quarry::run::stages {

namespace {

using json = nlohmann::ordered_json;

/// rag answers are short: the output budget of a question. 1024 tokens hold the longest answer the
/// shipped rag_answer schema allows (an answer of 160 characters and two quotes of 200, about 600
/// characters with the JSON around them) even when every character takes a token of its own, as
/// grounded quotes of unusual text can.
std::size_t rag_answer_tokens(const JobSpec& job) { return std::min<std::size_t>(job.engine.max_tokens, 1024); }

/// A prompt leaves at least this much room for the output (or max_tokens if smaller), else it is an error.
constexpr std::size_t k_min_output_tokens = 256;

/// kie: the output room a whole-document prompt must leave, else the document is cut into windows
/// (pipeline/run/chunked.hpp): --max-tokens, at most half of the context.
std::size_t kie_output_reserve(const JobSpec& job, std::size_t context_tokens) {
  return std::max<std::size_t>(1, std::min(job.engine.max_tokens, context_tokens / 2));
}

/// The windows of a kie document whose prompt does not fit `context_tokens` with the output reserve:
/// each window's prompt (built by `messages_of`) fits it. Empty when even an empty document leaves
/// no room for a window of 16 tokens. `pieces` > 1 (a document whose output ran past max_tokens, in
/// a prompt of `prompt_tokens`): windows of at most about 1 / pieces of its text, so that there are
/// at least `pieces` of them (a window's budget holds its overlap, an eighth of it).
template <class MessagesOf>
std::vector<ChunkPart> kie_windows(const BuildContext& bc, const std::string& text, std::size_t context_tokens,
                                   std::size_t reserve, const MessagesOf& messages_of, std::size_t pieces = 1,
                                   std::size_t prompt_tokens = 0) {
  const auto prompt_of = [&](const std::string& doc) {
    return bc.tokenizer->encode(bc.tokenizer->apply_chat_template(messages_of(doc), true, false));
  };
  const std::size_t overhead = prompt_of("").size();
  if (overhead + reserve + 16 > context_tokens) return {};
  std::size_t budget = context_tokens - reserve - overhead;
  if (pieces > 1 && prompt_tokens > overhead) {
    const std::size_t text_tokens = prompt_tokens - overhead;
    budget = std::min(budget, std::max<std::size_t>(16, (8 * text_tokens + 7 * pieces - 1) / (7 * pieces)));
  }
  const rag::TokenizerCounter counter(bc.tokenizer);
  // Joins of pieces may tokenize a little longer than planned: re-plan with a smaller budget then.
  for (int round = 0; round < 4 && budget >= 16; ++round) {
    WindowOptions wo;
    wo.budget_tokens = budget;
    wo.overlap_tokens = budget / 8;
    std::vector<ChunkPart> parts;
    std::size_t worst = 0;
    for (auto& w : plan_windows(text, counter, wo)) {
      ChunkPart p;
      p.prompt = prompt_of(w.text);
      worst = std::max(worst, p.prompt.size());
      p.text = std::move(w.text);
      p.first_page = w.first_page;
      p.first_offset = w.first_offset;
      parts.push_back(std::move(p));
    }
    if (worst + reserve <= context_tokens) return parts;
    const std::size_t excess = worst + reserve - context_tokens;
    budget = budget > excess + budget / 16 + 8 ? budget - excess - budget / 16 - 8 : 0;
  }
  return {};
}

/// Whether a request's response_format schema can be validated: checked (schema_check.hpp limits, $ref
/// cycles, patterns RE2 cannot run) and compiled once per schema text; the reason when it cannot.
class SchemaChecks {
 public:
  std::string problem(const std::string& schema_text) {
    if (auto it = seen_.find(schema_text); it != seen_.end()) return it->second;
    std::string why;
    try {
      const auto schema = schemas::parse_schema_text(schema_text, "response_format.json_schema.schema");
      schemas::Validator v(schema, "response_format.json_schema.schema");
    } catch (const std::exception& e) {
      why = e.what();
    }
    if (seen_.size() < 4096) seen_.emplace(schema_text, why);
    return why;
  }

 private:
  std::unordered_map<std::string, std::string> seen_;
};

/// A batch request line -> its model task, or the error record of a body the API would refuse (400).
std::optional<RecordMsg> build_batch_task(const Shared& sh, const BuildContext& bc, SchemaChecks& checks,
                                          const BatchRequestMsg& m, ModelTaskMsg& task) {
  const std::string where = m.subject.source + ": line " + std::to_string(m.line) + ": ";
  const auto refused = [&](const openai::ApiError& e) {
    // The error body names the line too, as the error line of a line that is not a request does.
    const openai::ApiError named(e.status, e.type, where + e.what(), e.param, e.code);
    return batch_error_record(m.subject, m.line, m.custom_id, "request", named.what(),
                              openai::batch_response_line(m.custom_id, e.status, openai::error_body(named)));
  };
  try {
    const auto endpoint = openai::endpoint_of_url(m.url);
    if (!endpoint) throw openai::ApiError(404, "invalid_request_error", "url " + m.url + " is not supported");
    const auto body = nlohmann::json::parse(m.body);
    const openai::Request r = openai::parse_request(body, *endpoint);
    if (r.stream)
      throw openai::ApiError(400, "invalid_request_error", "'stream' is not supported in a batch", "stream");
    if (r.format != openai::ResponseFormat::text)
      if (const auto why = checks.problem(r.schema_text); !why.empty())
        throw openai::ApiError(400, "invalid_request_error", why, "response_format.json_schema.schema");
    // Without max_tokens a request may use what the context leaves, capped by --max-tokens.
    const auto g = openai::to_generation_request(r, *bc.tokenizer, bc.context_tokens,
                                                 r.max_tokens ? 0 : sh.job.engine.max_tokens);
    task.subject = m.subject;
    task.prompt = g.prompt;
    task.max_tokens = g.max_tokens;
    task.attempt = 0;
    BatchSpec b;
    b.custom_id = m.custom_id;
    b.line = m.line;
    b.url = m.url;
    b.model = r.model;
    b.format = static_cast<int>(r.format);
    if (r.format != openai::ResponseFormat::text) b.schema_text = r.schema_text;
    b.temperature = r.temperature;
    b.top_p = r.top_p;
    b.min_p = r.min_p;
    b.top_k = r.top_k;
    b.seed = r.seed;
    b.stop = r.stop;
    task.batch = std::move(b);
    return std::nullopt;
  } catch (const openai::ApiError& e) {
    return refused(e);
  } catch (const nlohmann::json::exception& e) {
    return refused(openai::ApiError(400, "invalid_request_error", std::string("body: ") + e.what(), "body"));
  }
}

}  // namespace

void build_stage(Shared& sh, zmq::socket_t in, zmq::context_t& zctx, const BuildContext& bc) {
  auto to_engine = make_socket(zctx, zmq::socket_type::push, 4);
  to_engine.connect(ep_engine);
  auto to_validate = make_socket(zctx, zmq::socket_type::push, 8);
  to_validate.connect(ep_validate);
  auto to_writer = make_socket(zctx, zmq::socket_type::push, 16);
  to_writer.connect(ep_write);
  SchemaChecks schema_checks;
  for (;;) {
    auto m = recv(in);
    if (!m) continue;
    if (auto* req = std::get_if<BatchRequestMsg>(&*m)) {
      if (sh.stop() >= 1) {  // stopping: nothing new starts
        send(to_writer, NoticeMsg{NoticeMsg::Kind::cancelled, 1, std::nullopt});
        continue;
      }
      const auto t0 = std::chrono::steady_clock::now();
      ModelTaskMsg task;
      std::optional<RecordMsg> record;
      try {
        record = build_batch_task(sh, bc, schema_checks, *req, task);
      } catch (const std::exception& e) {
        record = batch_error_record(req->subject, req->line, req->custom_id, "internal", e.what(),
                                    openai::batch_response_line(req->custom_id, 500,
                                                                openai::error_body(openai::ApiError(500, "server_error", e.what()))));
      }
      sh.build_clock.add(seconds_since(t0));
      if (record) send(to_writer, *record);
      else send(to_engine, task);
      continue;
    }
    auto* doc = std::get_if<ExtractedMsg>(&*m);
    if (!doc) throw std::runtime_error("build: unexpected message");
    if (sh.stop() >= 1) {  // stopping: nothing new starts
      send(to_writer, NoticeMsg{NoticeMsg::Kind::cancelled, sh.units_per_doc, std::nullopt});
      continue;
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<ModelTaskMsg> tasks;
    std::vector<MappedMsg> mapped;
    std::vector<RecordMsg> records;
    std::size_t skipped = 0;
    try {
      if (sh.job.task == Task::kie) {
        if (sh.job.prefer == Prefer::automatic && doc->einvoice && bc.schema_prompt.empty() && doc->output_splits == 0) {
          mapped.push_back(MappedMsg{sh.unit(doc->doc, 0), "einvoice-" + doc->einvoice_format, *doc->einvoice});
        } else {
          ModelTaskMsg t;
          t.subject = sh.unit(doc->doc, 0);
          const auto messages_of = [&](const std::string& text) {
            return bc.schema_prompt.empty() ? bc.prompts.kie_messages(text)
                                            : bc.prompts.schema_messages(text, bc.schema_prompt);
          };
          t.prompt = bc.tokenizer->encode(bc.tokenizer->apply_chat_template(messages_of(doc->text), true, false));
          t.document_text = doc->text;  // grounded decoding and the evidence check
          if (bc.cross_check && doc->einvoice) {
            t.cross_check = *doc->einvoice;
            t.cross_check_method = "einvoice-" + doc->einvoice_format;
          }
          // Longer than the context (prompt + output), or an output longer than max_tokens (sent back
          // by validate): extracted over windows and merged (chunked.hpp).
          const std::size_t reserve = kie_output_reserve(sh.job, bc.context_tokens);
          t.output_splits = doc->output_splits;
          if (t.prompt.size() + reserve > bc.context_tokens || doc->output_splits > 0) {
            auto parts = kie_windows(bc, doc->text, bc.context_tokens, reserve, messages_of,
                                     std::size_t{1} << std::min(doc->output_splits, kMaxOutputSplits), t.prompt.size());
            if (parts.size() > 1) {
              t.chunks = std::move(parts);
              t.prompt.clear();
              t.max_tokens = reserve;
            }
          }
          tasks.push_back(std::move(t));
        }
      } else {
        const Document d = document_from_text(doc->doc.source, doc->text);
        rag::RagPromptOptions ro;
        ro.context_tokens = bc.context_tokens;
        ro.max_answer_tokens = rag_answer_tokens(sh.job);
        const rag::TokenizerCounter counter(bc.tokenizer);
        const auto prompts = rag::build_rag_prompts(d, bc.rag_questions, bc.rag_template, counter, ro);
        for (std::size_t q = 0; q < sh.questions.size(); ++q) {
          if (q < doc->done.size() && doc->done[q]) {
            ++skipped;
            continue;
          }
          ModelTaskMsg t;
          t.subject = sh.unit(doc->doc, q);
          t.prompt = bc.tokenizer->encode(bc.tokenizer->apply_chat_template(prompts.prompts[q].messages, true, false));
          t.whole_document = prompts.prompts[q].whole_document;
          t.document_text = doc->text;
          tasks.push_back(std::move(t));
        }
      }
      // Fit the context: prompt + output <= max_position_embeddings.
      std::vector<ModelTaskMsg> fitting;
      for (auto& t : tasks) {
        if (!t.chunks.empty()) {  // every window's prompt fits with max_tokens = the output reserve
          t.attempt = 0;
          fitting.push_back(std::move(t));
          continue;
        }
        const std::size_t n = t.prompt.size();
        const std::size_t room = bc.context_tokens > n ? bc.context_tokens - n : 0;
        if (room < std::min<std::size_t>(k_min_output_tokens, sh.job.engine.max_tokens)) {
          json st = stats_without_model(t.subject, 0);
          st["prompt_tokens"] = n;
          records.push_back(make_record(
              t.subject, "error", "model", nullptr,
              json::array({settings_error_entry(
                  "context", "the prompt is " + std::to_string(n) + " tokens; the model's context is " +
                                 std::to_string(bc.context_tokens) +
                                 " tokens, too little room for the output (--max-tokens, or a model with a longer context)")}),
              st));
          continue;
        }
        t.max_tokens = std::min(room, sh.job.task == Task::rag ? rag_answer_tokens(sh.job) : sh.job.engine.max_tokens);
        t.attempt = 0;
        fitting.push_back(std::move(t));
      }
      tasks = std::move(fitting);
    } catch (const std::exception& e) {
      // Every unit not done gets its error record (a rag document has one per question).
      tasks.clear();
      mapped.clear();
      records.clear();
      skipped = 0;
      for (std::size_t q = 0; q < sh.units_per_doc; ++q) {
        if (q < doc->done.size() && doc->done[q]) ++skipped;
        else records.push_back(error_record(sh.unit(doc->doc, q), nullptr, "internal", e.what()));
      }
    }
    sh.build_clock.add(seconds_since(t0));
    if (skipped) send(to_writer, NoticeMsg{NoticeMsg::Kind::skipped, skipped, std::nullopt});
    for (auto& r : records) send(to_writer, r);
    for (auto& mp : mapped) send(to_validate, mp);
    for (auto& t : tasks) send(to_engine, t);
  }
}

}  // namespace quarry::run::stages
