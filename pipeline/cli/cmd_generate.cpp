// `quarry generate` and `quarry tokenize`: the embedded engine from the command line.
//
// generate: --model defaults to models/quarry-extract-11m under the project root ($QUARRY_HOME).
// --json-schema FILE constrains the output to JSON valid for the schema (a schema the compiler
// rejects is an error, exit 1; --lenient ignores unsupported keywords with a warning; --jump-forward
// appends forced text without sampling).
// stdout gets the generated text (then, with --print-token-ids, one line holding the
// generated ids as a JSON array); --stats prints prefill/decode speed, TTFT and achieved GB/s to stderr.
// Exit codes: 0 done; 1 usage error or a model / tokenizer / messages file that cannot be used.
#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/runtime/engine.hpp"
#include "engine/tokenizer/tokenizer.hpp"
#include "pipeline/cli/commands.hpp"
#include "pipeline/paths.hpp"

namespace quarry::cli {

namespace {

namespace eng = quarry::engine;

struct GenerateArgs {
  std::string model, prompt, messages, json_schema;
  bool lenient = false, jump_forward = false;
  std::size_t max_tokens = 256;
  float temperature = 0.f, top_p = 1.f, min_p = 0.f;
  std::size_t top_k = 0;
  std::optional<std::uint64_t> seed;
  std::size_t threads = 0;
  std::size_t mtp = 0;
  std::string compute = "auto";
  std::string device = "auto";
  std::size_t tensor_parallel = 1;
  std::vector<std::string> stop;
  bool print_token_ids = false, stats = false, thinking = false;
};

/// OpenAI-style [{"role": ..., "content": ...}, ...] from a JSON file.
std::vector<eng::ChatMessage> read_messages(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open messages file");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw std::runtime_error(path + ": malformed JSON: " + e.what());
  }
  if (!j.is_array() || j.empty()) throw std::runtime_error(path + ": expected a non-empty JSON array of messages");
  std::vector<eng::ChatMessage> out;
  for (std::size_t i = 0; i < j.size(); ++i) {
    const auto& m = j[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
        !m["content"].is_string())
      throw std::runtime_error(path + ": message " + std::to_string(i) + " needs string \"role\" and \"content\"");
    out.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  return out;
}

/// The --model argument, or the default model folder; errors name the folder.
std::string model_dir_or_default(const std::string& model) {
  if (!model.empty()) return model;
  const auto dir = quarry::default_model_dir();
  if (!std::filesystem::is_directory(dir))
    throw std::runtime_error(dir.string() + ": default model folder not found (give --model DIR or set QUARRY_HOME)");
  return dir.string();
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open file");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string ids_json(const std::vector<eng::TokenId>& ids) { return nlohmann::json(ids).dump(); }

int run_generate(const GenerateArgs& args) {
  GenerateArgs a = args;
  a.model = model_dir_or_default(a.model);
  auto tok = eng::Tokenizer::from_dir(a.model);
  std::string prompt_text = a.prompt;
  if (!a.messages.empty()) prompt_text = tok->apply_chat_template(read_messages(a.messages), true, a.thinking);
  eng::EngineOptions opt;
  opt.n_threads = a.threads;
  opt.mtp_depth = a.mtp;
  opt.compute = eng::parse_compute(a.compute);
  opt.device = eng::parse_device(a.device);
  opt.tensor_parallel = a.tensor_parallel;
  opt.log = [](std::string_view msg) { spdlog::debug("{}", msg); };
  auto engine = eng::Engine::open(a.model, tok, opt);

  eng::GenerationRequest req;
  req.prompt = tok->encode(prompt_text);
  if (req.prompt.empty()) throw std::runtime_error("the prompt encodes to no tokens");
  req.max_tokens = a.max_tokens;
  req.sampling.temperature = a.temperature;
  req.sampling.top_p = a.top_p;
  req.sampling.top_k = a.top_k;
  req.sampling.min_p = a.min_p;
  req.sampling.seed = a.seed;
  req.stop = a.stop;
  if (!a.json_schema.empty()) {
    try {
      req.constraint = engine->json_schema_constraint(read_text_file(a.json_schema), a.lenient);
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error(a.json_schema + ": " + e.what());
    }
    const auto notes = engine->json_schema_notes(read_text_file(a.json_schema), a.lenient);
    for (const auto& w : notes.warnings) spdlog::warn("{}: {}", a.json_schema, w);
    for (const auto& w : notes.not_enforced) spdlog::warn("{}: not enforced by the grammar: {}", a.json_schema, w);
    req.jump_forward = a.jump_forward;
  }
  spdlog::debug("prompt: {} tokens", req.prompt.size());
  const auto r = engine->generate(req);
  if (!a.json_schema.empty() && r.finish == eng::FinishReason::length)
    spdlog::warn("generate: --max-tokens reached before the JSON value was complete");
  std::cout << r.text << "\n";
  if (a.print_token_ids) std::cout << ids_json(r.tokens) << "\n";
  std::cout.flush();
  if (a.stats) {
    const auto& s = engine->stats();
    std::fprintf(stderr,
                 "prompt tokens %zu, generated %zu (forced by the grammar: %zu; finish: %s)\n"
                 "prefill: %.1f tok/s, TTFT %.3f s\n"
                 "decode: %.2f tok/s, achieved %.2f GB/s (%.1f MB read per step)\n",
                 r.stats.prompt_tokens, r.stats.generated_tokens, r.stats.forced_tokens, eng::finish_reason_name(r.finish),
                 r.stats.prefill_tok_s(), r.stats.ttft_s, s.decode_tok_s(), s.decode_gb_s(),
                 s.decode_steps ? static_cast<double>(s.decode_bytes) / static_cast<double>(s.decode_steps) / 1e6 : 0.0);
    if (s.verify_steps > 0) {
      std::string per_pos;
      for (std::size_t j = 0; j < s.draft_proposed.size(); ++j)
        per_pos += (j ? ", " : "") + std::to_string(j + 1) + ": " + std::to_string(s.draft_accepted[j]) + "/" +
                   std::to_string(s.draft_proposed[j]);
      std::fprintf(stderr,
                   "mtp: %zu drafts (%zu forced by the grammar), %zu accepted (%.1f%%), %zu verify steps, "
                   "mean acceptance length %.2f tokens/step\n"
                   "mtp: accepted/proposed per draft position: %s\n"
                   "mtp: time in draft %.3f s, in verify %.3f s\n",
                   s.draft_tokens, s.forced_drafts, s.accepted_tokens,
                   s.draft_tokens ? 100.0 * static_cast<double>(s.accepted_tokens) / static_cast<double>(s.draft_tokens) : 0.0,
                   s.verify_steps, s.mean_acceptance_length(), per_pos.c_str(), s.draft_s, s.verify_s);
    }
  }
  return 0;
}

}  // namespace

void add_generate_command(CLI::App& app, Context& ctx) {
  auto args = std::make_shared<GenerateArgs>();
  auto* sub = app.add_subcommand("generate", "Generate text with the embedded engine");
  sub->add_option("--model", args->model,
                  "Model folder (config.json, safetensors, tokenizer.json); default: models/quarry-extract-11m")
      ->check(CLI::ExistingDirectory);
  auto* prompt = sub->add_option("--prompt", args->prompt, "Raw prompt text (no chat template)");
  auto* messages = sub->add_option("--messages", args->messages,
                                   "JSON file with a list of {role, content} messages; the chat template is applied")
                       ->check(CLI::ExistingFile);
  prompt->excludes(messages);
  sub->add_option("--max-tokens", args->max_tokens, "Most tokens to generate")->capture_default_str();
  sub->add_option("--temperature", args->temperature, "Sampling temperature; 0 is greedy")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  sub->add_option("--top-p", args->top_p, "Nucleus sampling mass (1: off)")->check(CLI::Range(0.0, 1.0));
  sub->add_option("--top-k", args->top_k, "Keep the k most likely tokens (0: off)");
  sub->add_option("--min-p", args->min_p, "Drop tokens below min_p x the top probability (0: off)")
      ->check(CLI::Range(0.0, 1.0));
  sub->add_option_function<std::uint64_t>("--seed", [args](const std::uint64_t& s) { args->seed = s; },
                                          "Random seed of the sampler (same seed, same output)");
  sub->add_option("--threads", args->threads, "Worker threads (0: all cores)")->capture_default_str();
  sub->add_option("--device", args->device,
                  "cpu, cuda, cuda:N, or auto (the first GPU when this build has the CUDA backend and a GPU is "
                  "present, else the CPU)")
      ->capture_default_str();
  sub->add_option("--tensor-parallel", args->tensor_parallel, "Split the model over N devices (tensor parallelism: cuda:I .. cuda:I+N-1 from --device cuda:I)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  sub->add_option("--mtp", args->mtp,
                  "MTP speculative decoding: most drafts per step (0: off; adaptive below it; output unchanged)")
      ->capture_default_str();
  sub->add_option("--compute", args->compute,
                  "auto (the checkpoint's dtype: bf16 on AMX tiles for a bf16 checkpoint where available), exact (f32) or bf16")
      ->check(CLI::IsMember({"auto", "exact", "bf16"}))
      ->capture_default_str();
  sub->add_option("--stop", args->stop, "Stop string (repeatable); the text is cut before it");
  sub->add_option("--json-schema", args->json_schema, "Constrain the output to JSON valid for this JSON Schema file")
      ->check(CLI::ExistingFile);
  sub->add_flag("--lenient", args->lenient, "With --json-schema: ignore unsupported keywords (warning) instead of failing");
  sub->add_flag("--jump-forward", args->jump_forward,
                "With --json-schema: append the text the grammar forces without sampling it (faster; the "
                "tokens then differ from the model's own split)");
  sub->add_flag("--print-token-ids", args->print_token_ids, "Also print the generated ids as a JSON array line");
  sub->add_flag("--stats", args->stats, "Print prefill/decode tok/s, TTFT and achieved GB/s to stderr");
  sub->add_flag("--thinking", args->thinking, "With --messages: enable Qwen3 thinking (enable_thinking=true)");
  sub->callback([args, prompt, messages, &ctx] {
    if (prompt->count() == 0 && messages->count() == 0) {
      spdlog::error("generate: give --prompt TEXT or --messages FILE");
      ctx.exit_code = 1;
      return;
    }
    try {
      ctx.exit_code = run_generate(*args);
    } catch (const std::exception& e) {
      spdlog::error("generate: {}", e.what());
      ctx.exit_code = 1;
    }
  });
}

void add_tokenize_command(CLI::App& app, Context& ctx) {
  auto model = std::make_shared<std::string>();
  auto text = std::make_shared<std::string>();
  auto* sub = app.add_subcommand("tokenize", "Print the token ids of a text as a JSON array (no special tokens added)");
  sub->add_option("--model", *model, "Model folder holding tokenizer.json; default: models/quarry-extract-11m")
      ->check(CLI::ExistingDirectory);
  sub->add_option("text", *text, "Text to tokenize")->required();
  sub->callback([model, text, &ctx] {
    try {
      auto tok = eng::Tokenizer::from_dir(model_dir_or_default(*model));
      std::cout << ids_json(tok->encode(*text)) << std::endl;
    } catch (const std::exception& e) {
      spdlog::error("tokenize: {}", e.what());
      ctx.exit_code = 1;
    }
  });
}

}  // namespace quarry::cli
