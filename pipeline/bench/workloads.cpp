#include "pipeline/bench/workloads.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "engine/runtime/sampler.hpp"
#include "extractors/extract.hpp"

namespace quarry::bench {

namespace fs = std::filesystem;
using engine::ChatMessage;
using engine::TokenId;

namespace {

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error(p.string() + ": cannot open (bench input)");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> read_lines(const fs::path& p) {
  std::istringstream in(read_file(p));
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) out.push_back(line);
  }
  if (out.empty()) throw std::runtime_error(p.string() + ": no questions in the file");
  return out;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (std::size_t i = s.find(from); i != std::string::npos; i = s.find(from, i + to.size())) s.replace(i, from.size(), to);
  return s;
}

std::size_t scaled(double base, double scale, std::size_t at_least) {
  return std::max<std::size_t>(at_least, static_cast<std::size_t>(std::llround(base * scale)));
}

// Built-in prompts (used when the model folder has no prompts.json), in the spirit of the seed's.
constexpr const char* kKieSystem =
    "You extract data from invoices. Write one JSON object following the invoice schema: dates as "
    "YYYY-MM-DD, amounts as numbers, identifiers exactly as printed, null for what the document does not state.";
constexpr const char* kRagSystem =
    "You answer questions about a document. Write one JSON object with the answer, the evidence quoted "
    "verbatim from the document, and the page numbers of the evidence; answer null when the document does not say.";
constexpr const char* kCodeRequest =
    "Write a Python function binary_search(items, target) that returns the index of target in the sorted "
    "list items, or -1 when it is absent. Add a docstring, type hints and three doctest examples.";
constexpr const char* kHungarianRequest =
    "Írj egy nagyjából 200 szavas összefoglalót magyarul arról, mire való egy adatplatform-szolgáltatási "
    "szerződés, és milyen kötelezettségeket ró a szolgáltatóra és a megrendelőre.";

}  // namespace

WorkloadInputs load_workload_inputs(const fs::path& samples_dir, const fs::path& invoice_schema, std::uint64_t seed) {
  WorkloadInputs in;
  in.questions_en = read_lines(samples_dir / "questions" / "services-agreement.txt");
  in.questions_hu = read_lines(samples_dir / "questions" / "services-agreement.hu.txt");
  const fs::path pdf = samples_dir / "long" / "services-agreement.pdf";
  auto doc = extract_file(pdf);
  if (!doc) throw std::runtime_error(doc.error().file + ": " + doc.error().reason);
  in.long_document = doc->text();
  if (in.long_document.size() < 1000) throw std::runtime_error(pdf.string() + ": too little text for long-rag");

  std::vector<fs::path> invoices;
  const fs::path inv_dir = samples_dir / "invoices";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(inv_dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("hu-txt-", 0) == 0 && e.path().extension() == ".txt") invoices.push_back(e.path());
  }
  if (ec || invoices.empty()) throw std::runtime_error(inv_dir.string() + ": no hu-txt-*.txt invoice for json-kie");
  std::sort(invoices.begin(), invoices.end());
  engine::Rng rng(seed);
  const fs::path inv = invoices[rng.next() % invoices.size()];
  in.invoice_text = read_file(inv);
  in.invoice_name = inv.filename().string();
  in.invoice_schema = read_file(invoice_schema);
  try {
    if (nlohmann::json::parse(in.invoice_schema).is_discarded()) throw std::runtime_error("discarded");
  } catch (const nlohmann::json::parse_error& e) {
    throw std::runtime_error(invoice_schema.string() + ": malformed JSON: " + e.what());
  }
  in.qa_index = rng.next() % in.questions_hu.size();
  in.rag_index = rng.next() % in.questions_en.size();
  in.kie_system = kKieSystem;
  in.rag_system = kRagSystem;
  return in;
}

std::vector<TokenId> filler_tokens(const WorkloadInputs& in, const engine::Tokenizer& tok, std::size_t n) {
  const std::vector<TokenId> one = tok.encode(in.long_document);
  if (one.empty()) throw std::runtime_error("bench: the long document encodes to no tokens");
  std::vector<TokenId> out;
  out.reserve(n);
  while (out.size() < n) out.insert(out.end(), one.begin(), one.begin() + std::min(one.size(), n - out.size()));
  return out;
}

Workload build_workload(const std::string& name, const WorkloadInputs& in, const engine::Tokenizer& tok,
                        double context_scale, double output_scale, const fs::path& prompts_json) {
  std::string kie_system = in.kie_system, rag_system = in.rag_system;
  std::string kie_user = "{document}", rag_user = "{document}\n\nQuestion: {question}";
  if (!prompts_json.empty() && fs::exists(prompts_json)) {
    try {
      const auto j = nlohmann::json::parse(read_file(prompts_json));
      if (j.contains("kie")) {
        kie_system = j["kie"].value("system", kie_system);
        kie_user = j["kie"].value("user", kie_user);
      }
      if (j.contains("rag")) {
        rag_system = j["rag"].value("system", rag_system);
        rag_user = j["rag"].value("user", rag_user);
      }
    } catch (const nlohmann::json::exception& e) {
      throw std::runtime_error(prompts_json.string() + ": " + e.what());
    }
  }
  auto encode = [&](const std::vector<ChatMessage>& m) { return tok.encode(tok.apply_chat_template(m, true, false)); };

  Workload w;
  w.name = name;
  if (name == "qa") {
    w.description = "Hungarian question about the services agreement (no context): \"" + in.questions_hu[in.qa_index] + "\"";
    w.prompt = encode({{"user", in.questions_hu[in.qa_index]}});
    w.max_tokens = scaled(256, output_scale, 2);
  } else if (name == "code") {
    w.description = "request for a Python binary search";
    w.prompt = encode({{"user", kCodeRequest}});
    w.max_tokens = scaled(300, output_scale, 2);
  } else if (name == "hungarian") {
    w.description = "request for a 200-word Hungarian summary";
    w.prompt = encode({{"user", kHungarianRequest}});
    w.max_tokens = scaled(256, output_scale, 2);
  } else if (name == "json-kie") {
    w.description = "invoice " + in.invoice_name + " -> JSON constrained by the invoice schema";
    w.prompt = encode({{"system", kie_system}, {"user", replace_all(kie_user, "{document}", in.invoice_text)}});
    w.max_tokens = scaled(300, output_scale, 2);
    w.ignore_eos = false;  // the grammar ends the output
    w.json_schema = in.invoice_schema;
  } else if (name == "long-rag-8k" || name == "long-rag-32k") {
    const double base = name == "long-rag-8k" ? 7500.0 : 30000.0;
    w.target_prompt_tokens = scaled(base, context_scale, 64);
    w.seed_positions = static_cast<std::size_t>(base) + 256;
    const std::string& q = in.questions_en[in.rag_index];
    auto messages = [&](const std::string& context) {
      return std::vector<ChatMessage>{
          {"system", rag_system},
          {"user", replace_all(replace_all(rag_user, "{document}", context), "{question}", q)}};
    };
    const std::size_t overhead = encode(messages("")).size();
    const std::size_t want = w.target_prompt_tokens > overhead ? w.target_prompt_tokens - overhead : 1;
    // The document, repeated as needed, cut at a token boundary; re-encoding may move the cut by a
    // token or two, so the prompt is within a few tokens of the target.
    std::vector<TokenId> ctx = filler_tokens(in, tok, want);
    std::string context = tok.decode(ctx, true);
    w.prompt = encode(messages(context));
    w.description = "services agreement (repeated as needed) cut to ~" + std::to_string(w.target_prompt_tokens) +
                    " prompt tokens + question \"" + q + "\"";
    w.max_tokens = scaled(256, output_scale, 2);
  } else {
    throw std::invalid_argument("bench: unknown workload \"" + name +
                                "\" (qa, code, json-kie, hungarian, long-rag-8k, long-rag-32k)");
  }
  return w;
}

}  // namespace quarry::bench
