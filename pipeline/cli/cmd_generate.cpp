// `quarry generate` and `quarry tokenize`: placeholder until the engine core lands (issue: engine core).
#include "pipeline/cli/commands.hpp"

#include <spdlog/spdlog.h>

namespace quarry::cli {

void add_generate_command(CLI::App& app, Context& ctx) {
  auto* sub = app.add_subcommand("generate", "Generate text with the embedded engine (not built yet)");
  sub->callback([&ctx] {
    spdlog::error("generate: the engine core is not built yet");
    ctx.exit_code = 1;
  });
}

void add_tokenize_command(CLI::App& app, Context& ctx) {
  auto* sub = app.add_subcommand("tokenize", "Print token ids of a text (not built yet)");
  sub->callback([&ctx] {
    spdlog::error("tokenize: the tokenizer is not built yet");
    ctx.exit_code = 1;
  });
}

}  // namespace quarry::cli
