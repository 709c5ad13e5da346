// bench_constrained [--model DIR] [--schema FILE] [--document FILE] [--runs N] [--threads N] [--device cpu|cuda[:N]]
//
// Greedy decoding of the default model (models/quarry-extract-11m) on a sample invoice with the KIE
// prompt, with and without the invoice-schema constraint. Per generated token: wall time of
// generate() / generated tokens, forward time (engine decode stats), and the constraint's own time
// (fill_bitmask + accept + is_terminated, measured by a timing wrapper). The unconstrained runs
// generate exactly as many tokens as the constrained one (ignore_eos, same max_tokens) so that the
// context lengths match. Run 0 of the constrained runs compiles the schema and fills the mask caches
// (cold); the median is over runs 1..N (warm: compiled grammars are cached by schema hash). Jump-forward
// runs: wall per output token (forced tokens included; they cost no decode step of their own).
// Prints a Markdown table.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "engine/runtime/engine.hpp"
#include "bench/common/options.hpp"

namespace eng = quarry::engine;
namespace fs = std::filesystem;

namespace {

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error(p.string() + ": cannot open");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// Times every call into the wrapped constraint.
class TimedConstraint final : public eng::TokenConstraint {
 public:
  explicit TimedConstraint(std::shared_ptr<eng::TokenConstraint> inner) : inner_(std::move(inner)) {}
  void fill_bitmask(std::span<std::uint32_t> m) override {
    const double t = now_s();
    inner_->fill_bitmask(m);
    seconds += now_s() - t;
  }
  void accept(eng::TokenId id) override {
    const double t = now_s();
    inner_->accept(id);
    seconds += now_s() - t;
  }
  bool is_terminated() const override {
    const double t = now_s();
    const bool r = inner_->is_terminated();
    seconds += now_s() - t;
    return r;
  }
  std::vector<eng::TokenId> take_forced_tokens() override {
    const double t = now_s();
    auto r = inner_->take_forced_tokens();
    seconds += now_s() - t;
    return r;
  }
  mutable double seconds = 0.0;

 private:
  std::shared_ptr<eng::TokenConstraint> inner_;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct Run {
  double wall_s = 0, forward_s = 0, constraint_s = 0;
  std::size_t tokens = 0, decode_steps = 0, forced = 0;
};

}  // namespace

int main(int argc, char** argv) {
  const fs::path src = QUARRY_SOURCE_DIR;
  fs::path model = src / "models/quarry-extract-11m", schema = src / "schemas/invoice.schema.json",
           document = src / "samples/invoices/en-txt-1.txt";
  int runs = 5;
  std::size_t threads = 0;
  std::string device = "cpu";
  const int rc = quarry::bench::parse_options(
      argc, argv, "bench_constrained",
      "usage: bench_constrained [--model DIR] [--schema FILE] [--document FILE] [--runs N] [--threads N]\n"
      "         [--device cpu|cuda[:N]]\n",
      [&](const std::string& a, const std::string& v) {
        if (a == "--model") model = v;
        else if (a == "--device") device = v;
        else if (a == "--schema") schema = v;
        else if (a == "--document") document = v;
        else if (a == "--runs") runs = std::max(2, std::stoi(v));
        else if (a == "--threads") threads = static_cast<std::size_t>(std::stoul(v));
        else return false;
        return true;
      });
  if (rc >= 0) return rc;
  try {
    auto tok = eng::Tokenizer::from_dir(model);
    eng::EngineOptions opt;
    opt.device = eng::parse_device(device);
    opt.n_threads = threads;
    auto engine = eng::Engine::open(model, tok, opt);
    const auto prompts = nlohmann::json::parse(read_file(model / "prompts.json"));
    const auto prompt = tok->encode(tok->apply_chat_template(
        {{"system", prompts["kie"]["system"].get<std::string>()}, {"user", read_file(document)}}, true, false));
    const std::string schema_text = read_file(schema);

    auto run_once = [&](bool constrained, std::size_t max_tokens, bool jump_forward = false) {
      eng::GenerationRequest req;
      req.prompt = prompt;
      req.max_tokens = max_tokens;
      std::shared_ptr<TimedConstraint> timed;
      if (constrained) {
        const double t = now_s();
        timed = std::make_shared<TimedConstraint>(engine->json_schema_constraint(schema_text));
        timed->seconds = now_s() - t;  // schema compile (cached after the first run)
        req.constraint = timed;
        req.jump_forward = jump_forward;
      } else {
        req.ignore_eos = true;
      }
      const auto before = engine->stats();
      const double t0 = now_s();
      const auto r = engine->generate(req);
      Run out;
      out.wall_s = now_s() - t0;
      out.forward_s = engine->stats().decode_s - before.decode_s;
      out.decode_steps = engine->stats().decode_steps - before.decode_steps;
      out.constraint_s = timed ? timed->seconds : 0.0;
      out.tokens = r.tokens.size();
      out.forced = r.stats.forced_tokens;
      return out;
    };

    const Run cold = run_once(true, 4096);
    const std::size_t n = cold.tokens;
    std::vector<double> c_wall, c_fwd, c_mask, u_wall, u_fwd, j_wall, j_fwd, j_mask;
    std::size_t j_forced = 0;
    for (int i = 1; i < runs + 1; ++i) {
      const Run c = run_once(true, 4096);
      const Run u = run_once(false, n);
      c_wall.push_back(c.wall_s / static_cast<double>(c.tokens));
      c_fwd.push_back(c.forward_s / static_cast<double>(std::max<std::size_t>(1, c.decode_steps)));
      c_mask.push_back(c.constraint_s / static_cast<double>(c.tokens));
      u_wall.push_back(u.wall_s / static_cast<double>(u.tokens));
      u_fwd.push_back(u.forward_s / static_cast<double>(std::max<std::size_t>(1, u.decode_steps)));
      const Run j = run_once(true, 4096, true);
      j_wall.push_back(j.wall_s / static_cast<double>(j.tokens));
      j_fwd.push_back(j.forward_s / static_cast<double>(std::max<std::size_t>(1, j.decode_steps)));
      j_mask.push_back(j.constraint_s / static_cast<double>(j.tokens));
      j_forced = j.forced;
    }
    std::printf("model %s, %zu prompt tokens, %zu generated tokens (constrained run ends by the grammar), %d runs\n\n",
                model.filename().c_str(), prompt.size(), n, runs);
    std::printf("| run | wall ms/token | forward ms/decode step | constraint us/token |\n|---|---|---|---|\n");
    std::printf("| unconstrained | %.3f | %.3f | - |\n", median(u_wall) * 1e3, median(u_fwd) * 1e3);
    std::printf("| constrained (warm) | %.3f | %.3f | %.1f |\n", median(c_wall) * 1e3, median(c_fwd) * 1e3,
                median(c_mask) * 1e6);
    std::printf("| constrained + jump-forward (warm; %zu of the tokens forced) | %.3f | %.3f | %.1f |\n", j_forced,
                median(j_wall) * 1e3, median(j_fwd) * 1e3, median(j_mask) * 1e6);
    std::printf("| constrained (cold: compile + cache fill) | %.3f | %.3f | %.1f |\n",
                cold.wall_s / static_cast<double>(n) * 1e3,
                cold.forward_s / static_cast<double>(std::max<std::size_t>(1, cold.decode_steps)) * 1e3,
                cold.constraint_s / static_cast<double>(n) * 1e6);
    std::printf("\nwall per token, constrained / unconstrained: %.3fx; constrained + jump-forward / unconstrained: %.3fx\n",
                median(c_wall) / median(u_wall), median(j_wall) / median(u_wall));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_constrained: %s\n", e.what());
    return 1;
  }
  return 0;
}
