// pipeline/rag: question files, BM25 retrieval on the long sample agreement against the answer pages
// written by the sample generator, prompt prefix sharing measured with the shipped model's tokenizer
// and chat template, and the evidence check against the generator's quotes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <set>
#include <sstream>

#include "extractors/extract.hpp"
#include "pipeline/rag/rag.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace quarry;
using namespace quarry::rag;

namespace {

const fs::path kSamples = fs::path(QUARRY_SOURCE_DIR) / "samples";
const fs::path kModel = fs::path(QUARRY_SOURCE_DIR) / "models" / "quarry-extract-11m";

struct Expected {
  std::string question, answer, evidence;
  int page = 0;
};

std::vector<Expected> expected_answers() {
  std::vector<Expected> out;
  std::ifstream in(kSamples / "questions" / "services-agreement.answers.jsonl");
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    json j = json::parse(line);
    out.push_back({j["question"], j["answer"], j["evidence"], j["page"]});
  }
  return out;
}

const Document& agreement() {
  static const Document doc = [] {
    auto d = extract_file(kSamples / "long" / "services-agreement.pdf");
    if (!d) throw std::runtime_error(d.error().reason);
    return *d;
  }();
  return doc;
}

std::vector<Question> questions(const std::string& file) {
  auto q = read_questions(kSamples / "questions" / file);
  if (!q) throw std::runtime_error(q.error().message());
  return *q;
}

QuestionFileError parse_error(const std::string& text) {
  auto r = parse_questions(text, "q.txt");
  EXPECT_FALSE(r.has_value()) << text;
  return r ? QuestionFileError{} : r.error();
}

// Context (the part of the user message before the question) of a prompt.
std::string context_of(const RagPrompt& p) {
  const std::string& user = p.messages.at(1).content;
  auto q = user.rfind("\n\nQuestion: ");
  return user.substr(0, q);
}

std::size_t common_prefix(const std::vector<engine::TokenId>& a, const std::vector<engine::TokenId>& b) {
  std::size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

}  // namespace

// --- Question files ------------------------------------------------------------------------------

TEST(Questions, SampleFiles) {
  auto en = questions("services-agreement.txt");
  auto hu = questions("services-agreement.hu.txt");
  auto jl = questions("services-agreement.answers.jsonl");  // JSON lines with "question" (and more)
  ASSERT_EQ(en.size(), 43u);
  ASSERT_EQ(hu.size(), 43u);
  ASSERT_EQ(jl.size(), 43u);
  auto ref = expected_answers();
  for (std::size_t i = 0; i < en.size(); ++i) {
    EXPECT_EQ(en[i].text, ref[i].question);
    EXPECT_EQ(jl[i].text, ref[i].question);
    EXPECT_EQ(en[i].line, i + 1);
    EXPECT_EQ(en[i].id, std::to_string(i + 1));
  }
  EXPECT_EQ(hu[2].text, "Mi a Megrendelő magyar adószáma?");
}

TEST(Questions, FormsAccepted) {
  auto r = parse_questions("\xEF\xBB\xBFWhat is the fee?\r\n\r\n{\"id\": \"q2\", \"question\": \" Who signs? \"}\n"
                           "{\"id\": 7, \"question\": \"When?\", \"answer\": \"x\"}\n   \nLast one",
                           "q.txt");
  ASSERT_TRUE(r) << r.error().message();
  ASSERT_EQ(r->size(), 4u);
  EXPECT_EQ((*r)[0].text, "What is the fee?");
  EXPECT_EQ((*r)[0].id, "1");
  EXPECT_EQ((*r)[1].id, "q2");
  EXPECT_EQ((*r)[1].text, "Who signs?");
  EXPECT_EQ((*r)[1].line, 3u);
  EXPECT_EQ((*r)[2].id, "7");
  EXPECT_EQ((*r)[3].text, "Last one");
  EXPECT_EQ((*r)[3].line, 6u);
}

TEST(Questions, ErrorsNameFileAndLine) {
  struct Case {
    std::string text;
    std::size_t line;
    std::string reason_part;
  };
  const Case cases[] = {
      {"ok\nok too\n{\"question\": \"x\",}\n", 3, "not a JSON object"},
      {"{\"q\": \"x\"}", 1, "no \"question\""},
      {"a\n{\"question\": 5}", 2, "not a string"},
      {"{\"question\": \"  \"}", 1, "empty"},
      {"{\"question\": \"x\", \"id\": [1]}", 1, "\"id\""},
      {"{\"question\": \"x\", \"id\": \"a\"}\n{\"question\": \"y\", \"id\": \"a\"}", 2, "already used on line 1"},
      {"one\ntwo\nbad \xC3\x28 byte\n", 3, "UTF-8"},
      {"[\"question\"]\n{1}", 2, "not a JSON object"},
      {"", 0, "no questions"},
      {"\n  \n\t\n", 0, "no questions"},
  };
  for (const auto& c : cases) {
    auto e = parse_error(c.text);
    EXPECT_EQ(e.file, "q.txt");
    EXPECT_EQ(e.line, c.line) << c.text;
    EXPECT_NE(e.reason.find(c.reason_part), std::string::npos) << e.reason;
    std::string where = c.line ? "q.txt:" + std::to_string(c.line) + ": " : "q.txt: ";
    EXPECT_TRUE(e.message().starts_with(where)) << e.message();
  }
  // A plain line that merely contains braces is a question.
  EXPECT_TRUE(parse_questions("What does {x} mean?", "q.txt"));

  auto missing = read_questions("/nonexistent/questions.txt");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().message(), "/nonexistent/questions.txt: no such file");
  auto dir = read_questions(kSamples);
  ASSERT_FALSE(dir);
  EXPECT_NE(dir.error().reason.find("directory"), std::string::npos);
}

// --- BM25 ----------------------------------------------------------------------------------------

TEST(Bm25, Terms) {
  EXPECT_EQ(bm25_terms("The Customer's tax number: 26417358-2-41."),
            (std::vector<std::string>{"the", "customer", "tax", "number", "26417358", "2", "41"}));
  EXPECT_EQ(bm25_terms("MEGRENDELŐ adószáma, ÁFA – Ügyfél"),
            (std::vector<std::string>{"megrendelő", "adószáma", "áfa", "ügyfél"}));
  EXPECT_EQ(bm25_terms("a I 5 x"), (std::vector<std::string>{"5"}));
  EXPECT_EQ(bm25_terms("“quoted” — and\xC2\xA0spaced"), (std::vector<std::string>{"quoted", "and", "spaced"}));
  EXPECT_TRUE(bm25_terms("\xFF\xFE garbage \xC3").size() == 1);
}

TEST(Bm25, ScoresFollowTheFormula) {
  // Three passages; the query "fee late" against them, worked out from the definition by hand:
  // N = 3, avgdl = (4 + 2 + 6) / 3 = 4.
  // "fee": in passages 0 (tf 1) and 2 (tf 2): idf = ln(1 + (3 - 2 + 0.5) / 2.5) = ln 1.6
  // "late": in passage 0 (tf 1): idf = ln(1 + 2.5 / 1.5) = ln(8/3)
  std::vector<std::string> passages = {"the late fee applies", "no match", "fee fee and other words here"};
  Bm25Index index(passages);
  auto s = index.scores("late FEE fee");  // repeated query terms count once
  const double k1 = 1.2, b = 0.75;
  auto part = [&](double tf, double len) { return tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / 4.0)); };
  EXPECT_NEAR(s[0], std::log(1.6) * part(1, 4) + std::log(8.0 / 3.0) * part(1, 4), 1e-12);
  EXPECT_EQ(s[1], 0.0);
  EXPECT_NEAR(s[2], std::log(1.6) * part(2, 6), 1e-12);
  EXPECT_GT(s[0], s[2]);  // the rarer term decides

  // b = 0: no length normalisation; k1 = 0: term frequency ignored.
  Bm25Index flat(passages, {0.0, 0.75});
  auto f = flat.scores("fee");
  EXPECT_NEAR(f[0], f[2], 1e-12);
  EXPECT_TRUE(Bm25Index({}).scores("x").empty());
}

TEST(Bm25, RetrieveRespectsBudgetAndReturnsPositionOrder) {
  std::vector<std::string> passages = {"alpha beta", "gamma", "alpha alpha alpha", "delta", "alpha gamma"};
  Bm25Index index(passages);
  std::vector<std::size_t> tokens = {10, 10, 10, 10, 50};
  auto r = retrieve(index, "alpha gamma", tokens, 30);
  // Best scores: 4 ("alpha gamma", 50 tokens: does not fit), 2, 1, 0 -> 0, 1, 2 by position.
  EXPECT_EQ(r, (std::vector<std::size_t>{0, 1, 2}));
  EXPECT_EQ(retrieve(index, "alpha gamma", tokens, 1000, 2).size(), 2u);
  EXPECT_TRUE(retrieve(index, "omega", tokens, 1000).empty());  // nothing matches: nothing retrieved
  auto all = retrieve(index, "alpha gamma", tokens, 1000);
  EXPECT_TRUE(std::is_sorted(all.begin(), all.end()));
}

// --- Retrieval on the long sample ------------------------------------------------------------------

// Share of the questions whose retrieved context holds the page of the expected evidence (and the
// evidence itself, white space normalised).
struct Rates {
  double page = 0, evidence = 0;
  double mean_chunks = 0;
};

Rates retrieval_rates(const std::vector<Question>& qs, RagPromptOptions opts) {
  EstimateTokenCounter counter;
  RagTemplate tmpl = load_rag_template(kModel / "prompts.json");
  auto prompts = build_rag_prompts(agreement(), qs, tmpl, counter, opts);
  auto ref = expected_answers();
  int page_hits = 0, evidence_hits = 0;
  std::size_t chunks = 0;
  for (std::size_t i = 0; i < qs.size(); ++i) {
    const auto& p = prompts.prompts[i];
    EXPECT_FALSE(p.whole_document);
    EXPECT_LE(p.prompt_tokens + opts.max_answer_tokens, opts.context_tokens);
    chunks += p.chunks.size();
    if (std::count(p.pages.begin(), p.pages.end(), ref[i].page)) ++page_hits;
    if (normalize_whitespace(context_of(p)).find(normalize_whitespace(ref[i].evidence)) != std::string::npos)
      ++evidence_hits;
  }
  const double n = static_cast<double>(qs.size());
  return {page_hits / n, evidence_hits / n, static_cast<double>(chunks) / n};
}

RagPromptOptions options(std::size_t ctx, std::size_t chunk, Retrieval mode, std::size_t retrieval_tokens = 0,
                         std::size_t max_chunks = 0) {
  RagPromptOptions o;
  o.context_tokens = ctx;
  o.chunk.max_tokens = chunk;
  o.retrieval = mode;
  o.retrieval_tokens = retrieval_tokens;
  o.max_chunks = max_chunks;
  return o;
}

TEST(RagRetrieval, FindsTheAnswerPageOnTheLongSample) {
  auto en = questions("services-agreement.txt");
  auto hu = questions("services-agreement.hu.txt");
  EstimateTokenCounter counter;
  std::cout << "[ rag      ] services-agreement.pdf: " << agreement().pages.size() << " pages, "
            << counter.count(agreement().text()) << " tokens (estimate); 43 questions\n";
  auto report = [&](const char* what, const RagPromptOptions& o) {
    Rates r = retrieval_rates(en, o);
    Rates h = retrieval_rates(hu, o);
    std::cout << "[ rag      ] " << what << ", context " << o.context_tokens << ", chunks of " << o.chunk.max_tokens
              << " (" << r.mean_chunks << " retrieved): answer page " << r.page * 100 << "%, evidence "
              << r.evidence * 100 << "%; Hungarian questions " << h.page * 100 << "% / " << h.evidence * 100 << "%\n";
    return r;
  };
  for (std::size_t chunk : {128, 256, 512}) report("shared", options(8192, chunk, Retrieval::shared));
  report("shared", options(4096, 256, Retrieval::shared));
  report("per question", options(8192, 256, Retrieval::per_question));
  report("per question, 1024 tokens", options(8192, 256, Retrieval::per_question, 1024));
  report("per question, top-1", options(8192, 256, Retrieval::per_question, 0, 1));
  report("per question, top-3", options(8192, 256, Retrieval::per_question, 0, 3));

  // Floors a little below what was measured (the report lines above; at the time of writing: shared
  // 100% page / 93.0% evidence, per question 100% / 100%, top-1 88.4% / 86.0%, top-3 97.7% / 97.7%).
  Rates shared = retrieval_rates(en, options(8192, 256, Retrieval::shared));
  EXPECT_GE(shared.page, 0.95);
  EXPECT_GE(shared.evidence, 0.90);
  EXPECT_GE(retrieval_rates(en, options(8192, 256, Retrieval::per_question)).evidence, 0.95);
  EXPECT_GE(retrieval_rates(en, options(8192, 256, Retrieval::per_question, 1024)).evidence, 0.95);
  EXPECT_GE(retrieval_rates(en, options(8192, 256, Retrieval::per_question, 0, 1)).page, 0.85);
  EXPECT_GE(retrieval_rates(en, options(8192, 256, Retrieval::per_question, 0, 3)).evidence, 0.95);
}

// --- Prompts -------------------------------------------------------------------------------------

TEST(RagPrompts, TemplateFromTheModel) {
  RagTemplate t = load_rag_template(kModel / "prompts.json");
  EXPECT_FALSE(t.system.empty());
  EXPECT_NE(t.user.find("{document}"), std::string::npos);
  fs::path bad = fs::path(QUARRY_BINARY_DIR) / "tests" / "rag" / "bad_prompts.json";
  {
    std::ofstream(bad) << R"({"rag": {"system": "s", "user": "Question: {question}\n{document}"}})";
  }
  try {
    load_rag_template(bad);
    ADD_FAILURE() << "accepted a template with the question first";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(bad.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("question must come last"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_rag_template(kSamples / "nonexistent.json"), std::runtime_error);
  EXPECT_THROW(build_rag_prompts(agreement(), questions("services-agreement.txt"), {"s", "{question} {document}"},
                                 EstimateTokenCounter{}),
               std::invalid_argument);
  RagPromptOptions tiny;
  tiny.context_tokens = 300;
  EXPECT_THROW(build_rag_prompts(agreement(), questions("services-agreement.txt"), t, EstimateTokenCounter{}, tiny),
               std::invalid_argument);
}

TEST(RagPrompts, WholeDocumentWhenItFits) {
  RagTemplate t = load_rag_template(kModel / "prompts.json");
  auto qs = questions("services-agreement.txt");
  auto invoice = extract_file(kSamples / "invoices" / "en-txt-1.txt");
  ASSERT_TRUE(invoice);
  auto small = build_rag_prompts(*invoice, qs, t, EstimateTokenCounter{});
  ASSERT_EQ(small.prompts.size(), qs.size());
  EXPECT_TRUE(small.chunks.empty());
  for (const auto& p : small.prompts) {
    EXPECT_TRUE(p.whole_document);
    EXPECT_EQ(p.messages[0].role, "system");
    EXPECT_EQ(p.messages[0].content, t.system);
    EXPECT_EQ(p.messages[1].role, "user");
    EXPECT_EQ(p.messages[1].content, invoice->text() + "\n\nQuestion: " + p.question->text);  // the trained form
  }
  // The long agreement does not fit the shipped model's 8192 tokens; with a long context it does.
  auto chunked = build_rag_prompts(agreement(), qs, t, EstimateTokenCounter{});
  EXPECT_FALSE(chunked.prompts[0].whole_document);
  RagPromptOptions big;
  big.context_tokens = 32768;
  auto whole = build_rag_prompts(agreement(), qs, t, EstimateTokenCounter{}, big);
  EXPECT_TRUE(whole.prompts[0].whole_document);
  EXPECT_EQ(whole.prompts[0].pages.size(), agreement().pages.size());
  // A schema goes into the shared system message.
  big.schema = R"({"type": "object"})";
  auto with_schema = build_rag_prompts(agreement(), qs, t, EstimateTokenCounter{}, big);
  EXPECT_EQ(with_schema.prompts[5].messages[0].content, t.system + "\n\n" + big.schema);
}

TEST(RagPrompts, RetrievedContextKeepsThePages) {
  RagTemplate t = load_rag_template(kModel / "prompts.json");
  auto qs = questions("services-agreement.txt");
  auto r = build_rag_prompts(agreement(), qs, t, EstimateTokenCounter{});
  const std::size_t n_pages = agreement().pages.size();
  // Chunks rebuild the document's text exactly (no overlap, per page).
  {
    std::string rebuilt;
    std::size_t k = 0;
    for (std::size_t pi = 0; pi < n_pages; ++pi) {
      if (pi) rebuilt += '\f';
      bool first = true;
      for (; k < r.chunks.size() && r.chunks[k].first_page == agreement().pages[pi].number; ++k) {
        if (!first) rebuilt += '\n';
        rebuilt += r.chunks[k].text;
        first = false;
      }
    }
    EXPECT_EQ(rebuilt, agreement().text());
  }
  for (const auto& p : r.prompts) {
    std::string ctx = context_of(p);
    EXPECT_EQ(static_cast<std::size_t>(std::count(ctx.begin(), ctx.end(), '\f')), n_pages - 1);
    EXPECT_TRUE(std::is_sorted(p.chunks.begin(), p.chunks.end()));
    // Each retrieved chunk sits on its own page of the context.
    std::vector<std::string> pages;
    std::stringstream ss(ctx);
    for (std::string pg; std::getline(ss, pg, '\f');) pages.push_back(pg);
    pages.resize(n_pages);
    for (std::size_t c : p.chunks) {
      const auto& chunk = r.chunks[c];
      EXPECT_NE(pages[static_cast<std::size_t>(chunk.first_page - 1)].find(chunk.text), std::string::npos);
    }
  }
}

TEST(RagPrompts, QuestionsOfADocumentShareTheirPrefix) {
  // Rendered with the shipped model's tokenizer and chat template, as the engine sees them.
  auto tok = engine::Tokenizer::from_dir(kModel);
  TokenizerCounter counter(tok);
  RagTemplate t = load_rag_template(kModel / "prompts.json");
  auto qs = questions("services-agreement.txt");
  auto render = [&](const RagPrompt& p) { return tok->encode(tok->apply_chat_template(p.messages, true, false)); };

  // Whole document: consecutive questions share everything up to the question.
  RagPromptOptions big;
  big.context_tokens = 65536;
  auto whole = build_rag_prompts(agreement(), qs, t, counter, big);
  ASSERT_TRUE(whole.prompts[0].whole_document);
  std::vector<engine::TokenId> prev = render(whole.prompts[0]);
  for (std::size_t i = 1; i < whole.prompts.size(); ++i) {
    auto cur = render(whole.prompts[i]);
    // The prefix that ends just before the question text: system + document + "\n\nQuestion: ".
    RagPrompt head = whole.prompts[i];
    head.messages[1].content = head.messages[1].content.substr(0, head.messages[1].content.size() - qs[i].text.size());
    auto head_ids = tok->encode(tok->apply_chat_template({head.messages[0], head.messages[1]}, false, false));
    const std::size_t shared = common_prefix(prev, cur);
    EXPECT_GE(shared + 2, head_ids.size() - 5) << "question " << i;  // BPE may merge across the join
    EXPECT_GT(static_cast<double>(shared) / static_cast<double>(cur.size()), 0.99);
    prev = std::move(cur);
  }

  // Retrieval::shared (the model's own 8192-token context): the same, the context being retrieved.
  auto shared = build_rag_prompts(agreement(), qs, t, counter);
  ASSERT_FALSE(shared.prompts[0].whole_document);
  ASSERT_FALSE(shared.prompts[0].chunks.empty());
  double shared_sum = 0;
  prev = render(shared.prompts[0]);
  for (std::size_t i = 1; i < shared.prompts.size(); ++i) {
    auto cur = render(shared.prompts[i]);
    // The rendered prompt leaves room for the answer in the model's context.
    EXPECT_LE(cur.size() + RagPromptOptions{}.max_answer_tokens, RagPromptOptions{}.context_tokens);
    EXPECT_EQ(shared.prompts[i].chunks, shared.prompts[0].chunks);
    RagPrompt head = shared.prompts[i];
    head.messages[1].content = head.messages[1].content.substr(0, head.messages[1].content.size() - qs[i].text.size());
    auto head_ids = tok->encode(tok->apply_chat_template({head.messages[0], head.messages[1]}, false, false));
    const std::size_t n = common_prefix(prev, cur);
    EXPECT_GE(n + 2, head_ids.size() - 5) << "question " << i;
    shared_sum += static_cast<double>(n) / static_cast<double>(cur.size());
    prev = std::move(cur);
  }
  std::cout << "[ rag      ] shared retrieval: consecutive questions share " << shared_sum / (qs.size() - 1) * 100
            << "% of their prompt tokens on average (" << prev.size() << " tokens per prompt)\n";

  // Retrieval::per_question: what differs starts no earlier than the first chunk the two retrievals
  // disagree on; report how much is shared.
  RagPromptOptions pq;
  pq.retrieval = Retrieval::per_question;
  auto chunked = build_rag_prompts(agreement(), qs, t, counter, pq);
  shared_sum = 0;
  prev = render(chunked.prompts[0]);
  for (std::size_t i = 1; i < chunked.prompts.size(); ++i) {
    auto cur = render(chunked.prompts[i]);
    shared_sum += static_cast<double>(common_prefix(prev, cur)) / static_cast<double>(cur.size());
    const auto& a = chunked.prompts[i - 1].chunks;
    const auto& b = chunked.prompts[i].chunks;
    std::size_t same = 0;
    while (same < a.size() && same < b.size() && a[same] == b[same]) ++same;
    const std::string& ua = chunked.prompts[i - 1].messages[1].content;
    const std::string& ub = chunked.prompts[i].messages[1].content;
    std::size_t text_shared = 0;
    while (text_shared < ua.size() && text_shared < ub.size() && ua[text_shared] == ub[text_shared]) ++text_shared;
    std::size_t expected_min = 0;
    for (std::size_t k = 0; k < same; ++k) expected_min += chunked.chunks[a[k]].text.size();
    EXPECT_GE(text_shared, expected_min) << "question " << i;
    prev = std::move(cur);
  }
  std::cout << "[ rag      ] per-question retrieval: consecutive questions share "
            << shared_sum / (qs.size() - 1) * 100 << "% of their prompt tokens on average\n";
}

// --- Evidence ------------------------------------------------------------------------------------

TEST(Evidence, GeneratorQuotesPassAndAlteredOnesFail) {
  auto ref = expected_answers();
  for (const auto& e : ref) {
    json answer = {{"answer", e.answer}, {"evidence", {e.evidence}}, {"pages", {e.page}}};
    auto vs = check_evidence(answer, agreement());
    EXPECT_TRUE(vs.empty()) << e.question << ": " << (vs.empty() ? "" : vs[0].message);

    // Line breaks and doubled spaces inside the quote: still the same text.
    std::string spaced = e.evidence;
    for (auto& c : spaced)
      if (c == ' ') c = '\n';
    answer["evidence"] = {"  " + spaced + " "};
    EXPECT_TRUE(check_evidence(answer, agreement()).empty()) << spaced;

    // One character changed: not in the document.
    std::string altered = e.evidence;
    altered[altered.size() / 2] = altered[altered.size() / 2] == 'Z' ? 'Q' : 'Z';
    answer["evidence"] = {e.evidence, altered};
    vs = check_evidence(answer, agreement());
    ASSERT_EQ(vs.size(), 1u) << altered;
    EXPECT_EQ(vs[0].keyword, "rule:evidence");
    EXPECT_EQ(vs[0].pointer, "/evidence/1");

    // The right quote, the wrong page (the generator's evidence occurs on exactly one page).
    const int other = e.page == 1 ? 3 : 1;
    answer = {{"answer", e.answer}, {"evidence", {e.evidence}}, {"pages", {other}}};
    vs = check_evidence(answer, agreement());
    ASSERT_EQ(vs.size(), 1u) << e.evidence;
    EXPECT_EQ(vs[0].keyword, "rule:evidence_page");

    answer["pages"] = {e.page, 99};
    vs = check_evidence(answer, agreement());
    ASSERT_EQ(vs.size(), 1u);
    EXPECT_EQ(vs[0].keyword, "rule:pages");
    EXPECT_EQ(vs[0].pointer, "/pages/1");
  }
  // Null answers and wrong types are the schema's business.
  EXPECT_TRUE(check_evidence(json{{"answer", nullptr}, {"evidence", json::array()}, {"pages", json::array()}}, agreement()).empty());
  EXPECT_TRUE(check_evidence(json{{"evidence", 5}, {"pages", "x"}}, agreement()).empty());
  EXPECT_TRUE(check_evidence(json::array(), agreement()).empty());
  EXPECT_EQ(normalize_whitespace(" a \t\n b\xC2\xA0" "c\f\fd  "), "a b c d");
}

TEST(Questions, RandomBytesNeverCrash) {
  std::mt19937 rng(5);
  const std::string seed = "What?\n{\"id\": 1, \"question\": \"Who?\"}\n\xC5\x91 \"{}\"\n";
  for (int i = 0; i < 2000; ++i) {
    std::string s = seed;
    for (int k = 0; k < 4; ++k) s[rng() % s.size()] = static_cast<char>(rng() % 256);
    auto r = parse_questions(s, "fuzz.txt");
    if (!r) {
      EXPECT_TRUE(r.error().message().starts_with("fuzz.txt")) << r.error().message();
    }
  }
}

TEST(Questions, FileErrorsNameThePath) {
  fs::path p = fs::path(QUARRY_BINARY_DIR) / "tests" / "rag" / "bad_questions.jsonl";
  {
    std::ofstream(p) << "{\"question\": \"fine\"}\n{\"question\": \"broken\"\n";
  }
  auto r = read_questions(p);
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().message().starts_with(p.string() + ":2: not a JSON object")) << r.error().message();
}

TEST(Evidence, QuoteAcrossAPageBreak) {
  const auto& pages = agreement().pages;
  ASSERT_GE(pages.size(), 3u);
  // The last line of page 1 and the first line of page 2, as one quote.
  std::string quote = pages[0].lines.back().text + "\n" + pages[1].lines.front().text;
  auto with_pages = [&](json p) {
    return check_evidence(json{{"answer", "x"}, {"evidence", {quote}}, {"pages", p}}, agreement());
  };
  EXPECT_TRUE(with_pages({1}).empty());
  EXPECT_TRUE(with_pages({2}).empty());
  EXPECT_TRUE(with_pages({1, 2}).empty());
  auto vs = with_pages({3});
  ASSERT_EQ(vs.size(), 1u);
  EXPECT_EQ(vs[0].keyword, "rule:evidence_page");
}

// Grounded quotes (schemas/rag_answer.schema.json: x-quarry-source copy) may leave out a white space
// run of the document, as the copy automaton allows: still evidence, on the page of their span; and
// the pages of an answer's quotes are where they are printed.
TEST(Evidence, GroundedQuotesAndTheirPages) {
  Document d;
  d.source = "g.txt";
  for (int n = 1; n <= 3; ++n) {
    Page p;
    p.number = n;
    p.lines.push_back(Line{n == 2 ? "IBAN: HU42 1177 3016 1111" : "Page " + std::to_string(n) + " text", {}, 0});
    d.pages.push_back(p);
  }
  const json a = {{"answer", "x"}, {"evidence", {"HU4211773016"}}, {"pages", {2}}};
  EXPECT_TRUE(check_evidence(a, d).empty());
  auto vs = check_evidence(json{{"answer", "x"}, {"evidence", {"HU4211773016"}}, {"pages", {3}}}, d);
  ASSERT_EQ(vs.size(), 1u);
  EXPECT_EQ(vs[0].keyword, "rule:evidence_page");
  vs = check_evidence(json{{"answer", "x"}, {"evidence", {"HU42117730169"}}, {"pages", json::array()}}, d);
  ASSERT_EQ(vs.size(), 1u);
  EXPECT_EQ(vs[0].keyword, "rule:evidence");

  const std::vector<std::string> pages = {"Page 1 text", "IBAN: HU42 1177 3016 1111", "Page 3 text"};
  const auto p = evidence_pages(json{{"evidence", {"Page 3", "HU4211773016", "Page 3 text"}}}, pages);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(*p, (std::vector<int>{2, 3}));
  EXPECT_EQ(evidence_pages(json{{"evidence", json::array()}}, pages), std::vector<int>{});
  EXPECT_FALSE(evidence_pages(json{{"evidence", {"not there"}}}, pages).has_value());
  EXPECT_FALSE(evidence_pages(json{{"evidence", {1}}}, pages).has_value());
  EXPECT_FALSE(evidence_pages(json{{"answer", "x"}}, pages).has_value());
}
