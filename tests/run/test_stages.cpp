// The run's typed messages (pipeline/run/messages.hpp) and one stage tested alone on its sockets
// (validate: records, retries), as the coordinator wires them.
#include <gtest/gtest.h>

#include <thread>

#include "pipeline/run/messages.hpp"
#include "pipeline/run/stages.hpp"

namespace {

using namespace quarry::run;
using json = nlohmann::ordered_json;

template <class T>
T roundtrip(const T& m) {
  const auto bytes = encode(Message(m));
  const Message back = decode(bytes.data(), bytes.size());
  const T* t = std::get_if<T>(&back);
  EXPECT_NE(t, nullptr);
  return t ? *t : T{};
}

Subject subject() {
  Subject s;
  s.key = "dir/caf\\xe9.pdf#q1";
  s.source = "dir/caf\\xe9.pdf";
  s.source_b64 = "ZGlyL2NhZumucGRm";
  s.sha256 = std::string(64, 'a');
  s.question_id = "q1";
  s.question = "Total?";
  s.extract_ms = 12.5;
  return s;
}

TEST(Messages, EveryMessageComesBackAsItWasSent) {
  InputMsg in{std::string("dir/caf\xe9.pdf"), "dir/caf\\xe9.pdf", "ZGlyL2NhZumucGRm", "not a regular file (FIFO)"};
  const auto in2 = roundtrip(in);
  EXPECT_EQ(in2.path, in.path);  // not UTF-8: carried as bytes
  EXPECT_EQ(in2.problem, in.problem);

  ExtractedMsg ex;
  ex.doc = subject();
  ex.text = "page 1\fpage 2";
  ex.pages = 2;
  ex.einvoice = json{{"invoice_number", "A-1"}, {"currency", "EUR"}};
  ex.einvoice_format = "ubl";
  ex.done = {true, false};
  ex.output_splits = 2;
  const auto ex2 = roundtrip(ex);
  EXPECT_EQ(ex2.doc.key, ex.doc.key);
  EXPECT_EQ(ex2.doc.extract_ms, 12.5);
  EXPECT_EQ(ex2.text, ex.text);
  EXPECT_EQ(ex2.einvoice->dump(), ex.einvoice->dump());  // member order kept
  EXPECT_EQ(ex2.done, ex.done);
  EXPECT_EQ(ex2.output_splits, 2u);

  GeneratedMsg g;
  g.task.subject = subject();
  g.task.prompt = {1, 2, 151643};
  g.task.max_tokens = 300;
  g.task.attempt = 2;
  g.task.output_splits = 1;
  g.task.best_record = json{{"status", "invalid"}, {"data", {{"n", 1}}}};
  g.text = "{}";
  g.finish = "eos";
  g.stats = json{{"prompt_tokens", 3}, {"decode_tokens", 1}};
  const auto g2 = roundtrip(g);
  EXPECT_EQ(g2.task.prompt, g.task.prompt);
  EXPECT_EQ(g2.task.attempt, 2u);
  EXPECT_EQ(g2.task.output_splits, 1u);
  ASSERT_TRUE(g2.task.best_record.has_value());
  EXPECT_EQ(g2.task.best_record->dump(), g.task.best_record->dump());
  EXPECT_EQ(g2.stats.dump(), g.stats.dump());

  RecordMsg r;
  r.key = "k";
  r.record = json{{"source", "s"}, {"status", "ok"}};
  r.tokens = TokenCounts{10, 4, 6, 20, 0, 0};
  const auto r2 = roundtrip(r);
  EXPECT_EQ(r2.record.dump(), r.record.dump());
  ASSERT_TRUE(r2.tokens.has_value());
  EXPECT_EQ(r2.tokens->cached, 6u);

  const auto n2 = roundtrip(NoticeMsg{NoticeMsg::Kind::cancelled, 3, std::nullopt});
  EXPECT_EQ(n2.kind, NoticeMsg::Kind::cancelled);
  EXPECT_EQ(n2.count, 3u);
  EXPECT_FALSE(n2.tokens.has_value());
}

TEST(Messages, BytesThatAreNoMessageAreRefused) {
  const std::uint8_t junk[] = {0x2a, 0x91, 0x01};
  EXPECT_THROW(decode(junk, sizeof junk), std::runtime_error);
  EXPECT_THROW(decode(junk, 0), std::runtime_error);
  const std::uint8_t short_input[] = {0x00, 0x91, 0xc4, 0x01, 'a'};  // an InputMsg of one field
  EXPECT_THROW(decode(short_input, sizeof short_input), std::runtime_error);
}

TEST(Stages, ValidateAloneMakesRecordsAndRetries) {
  const json schema = json::parse(R"({"type": "object", "properties": {"n": {"type": "integer"}, "s": {"type": "string"}},
                                       "required": ["n"]})");
  quarry::schemas::Validator validator(quarry::run::to_plain(schema), "test.schema.json");
  JobSpec job;
  job.retries = 1;
  RunControl control;
  RunOptions options;
  stages::Shared sh(job, control, options);
  zmq::context_t zctx;
  auto validate_in = stages::make_socket(zctx, zmq::socket_type::pull, 8);
  validate_in.bind(stages::ep_validate);
  auto writer_in = stages::make_socket(zctx, zmq::socket_type::pull, 64);
  writer_in.bind(stages::ep_write);
  auto retry_in = stages::make_socket(zctx, zmq::socket_type::pull, 0);
  retry_in.bind(stages::ep_retry);
  auto to_validate = stages::make_socket(zctx, zmq::socket_type::push, 8);
  to_validate.connect(stages::ep_validate);
  std::thread t([&, sock = std::move(validate_in)]() mutable {
    stages::guarded(sh, "validate", [&] { stages::validate_stage(sh, std::move(sock), zctx, validator, schema); });
  });

  // A mapped document: members put in the schema's order, validated.
  send(to_validate, MappedMsg{subject(), "einvoice-ubl", json{{"s", "x"}, {"n", 1}}});
  auto m = recv(writer_in);
  ASSERT_TRUE(m.has_value());
  auto* rec = std::get_if<RecordMsg>(&*m);
  ASSERT_NE(rec, nullptr);
  EXPECT_EQ(rec->record["status"], "ok");
  EXPECT_EQ(rec->record["data"].dump(), R"({"n":1,"s":"x"})");
  EXPECT_EQ(rec->record["question_id"], "q1");

  // A generated output that fails the schema: retried once (attempt 1), then invalid.
  GeneratedMsg g;
  g.task.subject = subject();
  g.task.prompt = {1};
  g.text = R"({"s": "no n"})";
  g.finish = "eos";
  g.stats = json{{"prompt_tokens", 1}, {"decode_tokens", 5}};
  send(to_validate, g);
  m = recv(writer_in);
  ASSERT_TRUE(m.has_value());
  auto* note = std::get_if<NoticeMsg>(&*m);
  ASSERT_NE(note, nullptr);
  EXPECT_EQ(note->kind, NoticeMsg::Kind::retry);
  EXPECT_EQ(note->tokens->decode, 5u);
  // The retried task, sent again with g's output: the record validate writes then.
  const auto answer_retry = [&](GeneratedMsg& gm, bool& has_best) {
    auto rm = recv(retry_in);
    EXPECT_TRUE(rm.has_value());
    const auto* task = rm ? std::get_if<ModelTaskMsg>(&*rm) : nullptr;
    EXPECT_NE(task, nullptr);
    if (!task) return RecordMsg{};
    EXPECT_EQ(task->attempt, 1u);
    has_best = task->best_record.has_value();
    gm.task = *task;
    send(to_validate, gm);
    auto wm = recv(writer_in);
    const auto* r = wm ? std::get_if<RecordMsg>(&*wm) : nullptr;
    EXPECT_NE(r, nullptr);
    return r ? *r : RecordMsg{};
  };
  bool has_best = false;
  RecordMsg final_rec = answer_retry(g, has_best);
  rec = &final_rec;
  EXPECT_EQ(rec->record["status"], "invalid");
  EXPECT_EQ(rec->record["stats"]["attempts"], 2);
  EXPECT_EQ(rec->record["errors"][0]["rule"], "required");
  EXPECT_FALSE(rec->record["stats"].contains("kept_attempt"));  // equal errors: the last one

  // After retries the attempt with the fewest errors is kept, not the last one drawn: the first
  // attempt (one error) beats a retry whose output is not JSON at all.
  g.task = GeneratedMsg{}.task;
  g.task.subject = subject();
  g.task.prompt = {1};
  g.text = R"({"n": "one", "s": "first"})";
  g.stats = json{{"prompt_tokens", 1}, {"decode_tokens", 6}};
  send(to_validate, g);
  m = recv(writer_in);  // the retry notice
  ASSERT_TRUE(m.has_value() && std::get_if<NoticeMsg>(&*m));
  g.text = R"({"n": )";
  final_rec = answer_retry(g, has_best);
  EXPECT_TRUE(has_best);
  EXPECT_EQ(rec->record["status"], "invalid");
  EXPECT_EQ(rec->record["data"]["s"], "first") << rec->record.dump();
  EXPECT_EQ(rec->record["stats"]["attempts"], 2);
  EXPECT_EQ(rec->record["stats"]["kept_attempt"], 1);
  EXPECT_EQ(rec->record["errors"].size(), 1u);

  zctx.shutdown();
  t.join();
  EXPECT_FALSE(sh.failed.load()) << sh.fatal;
}

// --cross-check: the e-invoice's mapped values travel with the model task (and its retries).
TEST(StageMessages, CrossCheckReferenceRoundTrips) {
  ModelTaskMsg t;
  t.subject.key = t.subject.source = "a.pdf";
  t.prompt = {5, 6};
  t.cross_check = json{{"invoice_number", "INV-1"}, {"totals", {{"gross", 118.62}}}};
  t.cross_check_method = "einvoice-cii";
  GeneratedMsg g;
  g.task = t;
  const auto bytes = encode(Message(g));
  const auto back = std::get<GeneratedMsg>(decode(bytes.data(), bytes.size()));
  ASSERT_TRUE(back.task.cross_check);
  EXPECT_EQ(*back.task.cross_check, *t.cross_check);
  EXPECT_EQ(back.task.cross_check->begin().key(), "invoice_number");  // member order kept
  EXPECT_EQ(back.task.cross_check_method, "einvoice-cii");
  t.cross_check.reset();
  const auto plain = encode(Message(t));
  EXPECT_FALSE(std::get<ModelTaskMsg>(decode(plain.data(), plain.size())).cross_check);
}

}  // namespace
