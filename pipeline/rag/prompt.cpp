// Prompt assembly for question batches (see rag.hpp).
#include <algorithm>
#include <fstream>
#include <memory>
#include <stdexcept>

#include "pipeline/rag/rag.hpp"

namespace quarry::rag {
namespace {

constexpr std::string_view kDocument = "{document}";
constexpr std::string_view kQuestion = "{question}";
constexpr std::string_view kSchema = "{schema}";

// The user template split around its placeholders: head {document} middle {question} tail.
struct UserParts {
  std::string_view head, middle, tail;
};

// Where the template is wrong, or "" when it is usable.
std::string user_template_problem(std::string_view user) {
  auto d = user.find(kDocument), q = user.find(kQuestion);
  if (d == std::string_view::npos) return "the user template has no {document}";
  if (q == std::string_view::npos) return "the user template has no {question}";
  if (q < d) return "the user template puts {question} before {document}; the question must come last";
  return "";
}

UserParts split_user(std::string_view user) {
  auto d = user.find(kDocument);
  auto q = user.find(kQuestion, d + kDocument.size());
  return {user.substr(0, d), user.substr(d + kDocument.size(), q - d - kDocument.size()),
          user.substr(q + kQuestion.size())};
}

std::string user_message(const UserParts& u, std::string_view context, std::string_view question) {
  std::string out;
  out.reserve(u.head.size() + context.size() + u.middle.size() + question.size() + u.tail.size());
  out.append(u.head).append(context).append(u.middle).append(question).append(u.tail);
  return out;
}

std::string system_message(const std::string& system, const std::string& schema) {
  auto s = system.find(kSchema);
  if (s != std::string::npos) return system.substr(0, s) + schema + system.substr(s + kSchema.size());
  if (schema.empty()) return system;
  return system + "\n\n" + schema;
}

}  // namespace

RagTemplate load_rag_template(const std::filesystem::path& prompts_json) {
  const std::string name = prompts_json.string();
  std::ifstream in(prompts_json, std::ios::binary);
  if (!in) throw std::runtime_error(name + ": cannot open the prompt templates");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(name + ": not JSON (" + e.what() + ")");
  }
  const nlohmann::json* rag = j.is_object() && j.contains("rag") ? &j["rag"] : nullptr;
  if (!rag || !rag->is_object() || !rag->contains("system") || !(*rag)["system"].is_string() ||
      !rag->contains("user") || !(*rag)["user"].is_string())
    throw std::runtime_error(name + ": no \"rag\" object with \"system\" and \"user\" strings");
  RagTemplate t{(*rag)["system"].get<std::string>(), (*rag)["user"].get<std::string>()};
  if (auto problem = user_template_problem(t.user); !problem.empty())
    throw std::runtime_error(name + ": rag: " + problem);
  return t;
}

RagPrompts build_rag_prompts(const Document& doc, const std::vector<Question>& questions, const RagTemplate& tmpl,
                             const TokenCounter& counter, const RagPromptOptions& opts) {
  if (auto problem = user_template_problem(tmpl.user); !problem.empty()) throw std::invalid_argument(problem);
  const UserParts parts = split_user(tmpl.user);
  const std::string system = system_message(tmpl.system, opts.schema);
  const std::size_t system_tokens = counter.count(system);

  // Everything but the context, for the longest question: the same budget for every question of
  // the document, so that they retrieve alike and share prefixes.
  std::size_t fixed = 0;
  for (const auto& q : questions)
    fixed = std::max(fixed, counter.count(user_message(parts, "", q.text)));
  fixed += system_tokens + opts.chat_overhead_tokens + opts.max_answer_tokens;

  RagPrompts out;
  const std::string text = doc.text();
  const bool whole = fixed + counter.count(text) <= opts.context_tokens;

  std::vector<std::size_t> chunk_cost;
  std::size_t chunk_budget = 0;
  std::vector<std::size_t> chunk_page;  // index into doc.pages of each chunk
  std::unique_ptr<Bm25Index> index;
  if (!whole) {
    // The context keeps one form feed per page break; count them against the budget.
    const std::size_t page_breaks = doc.pages.empty() ? 0 : doc.pages.size() - 1;
    if (fixed + page_breaks >= opts.context_tokens)
      throw std::invalid_argument("context_tokens " + std::to_string(opts.context_tokens) +
                                  " leaves no room for the document: the prompt without it needs " +
                                  std::to_string(fixed + page_breaks) + " tokens (with the answer)");
    chunk_budget = opts.context_tokens - fixed - page_breaks;
    out.chunks = page_chunks(doc, counter, opts.chunk);
    std::vector<std::string> texts;
    texts.reserve(out.chunks.size());
    std::size_t page_index = 0;
    for (const auto& c : out.chunks) {
      texts.push_back(c.text);
      chunk_cost.push_back(c.tokens + 1);  // + the '\n' joining it to a neighbour
      while (page_index + 1 < doc.pages.size() && doc.pages[page_index].number != c.first_page) ++page_index;
      chunk_page.push_back(page_index);
    }
    index = std::make_unique<Bm25Index>(texts, opts.bm25);
  }

  // Retrieval::shared: one chunk set for all questions, taken from their rankings in rounds.
  std::vector<std::size_t> shared_chunks;
  if (!whole && opts.retrieval == Retrieval::shared) {
    std::vector<std::vector<std::size_t>> rankings;
    for (const auto& q : questions) rankings.push_back(ranked(*index, q.text));
    std::vector<bool> taken(out.chunks.size(), false);
    std::size_t used = 0;
    for (std::size_t round = 0;; ++round) {
      bool any_left = false;
      for (const auto& r : rankings) {
        if (round >= r.size()) continue;
        any_left = true;
        const std::size_t c = r[round];
        if (taken[c] || used + chunk_cost[c] > chunk_budget) continue;
        taken[c] = true;
        used += chunk_cost[c];
      }
      if (!any_left) break;
    }
    for (std::size_t c = 0; c < taken.size(); ++c)
      if (taken[c]) shared_chunks.push_back(c);
  }
  const std::size_t per_question_budget =
      opts.retrieval_tokens ? std::min(opts.retrieval_tokens, chunk_budget) : chunk_budget;

  out.prompts.reserve(questions.size());
  for (const auto& q : questions) {
    RagPrompt p;
    p.question = &q;
    p.whole_document = whole;
    std::string context;
    if (whole) {
      context = text;
      for (const auto& page : doc.pages) p.pages.push_back(page.number);
    } else {
      p.chunks = opts.retrieval == Retrieval::shared
                     ? shared_chunks
                     : retrieve(*index, q.text, chunk_cost, per_question_budget, opts.max_chunks);
      // Document::text() with the unretrieved chunks left out: every page break kept.
      std::size_t k = 0;
      for (std::size_t pi = 0; pi < doc.pages.size(); ++pi) {
        if (pi > 0) context += '\f';
        bool first_on_page = true;
        for (; k < p.chunks.size() && chunk_page[p.chunks[k]] == pi; ++k) {
          if (!first_on_page) context += '\n';
          context += out.chunks[p.chunks[k]].text;
          first_on_page = false;
        }
        if (!first_on_page) p.pages.push_back(doc.pages[pi].number);
      }
    }
    std::string user = user_message(parts, context, q.text);
    p.prompt_tokens = system_tokens + counter.count(user) + opts.chat_overhead_tokens;
    p.messages = {{"system", system}, {"user", std::move(user)}};
    out.prompts.push_back(std::move(p));
  }
  return out;
}

}  // namespace quarry::rag
