// `quarry schema`: placeholder until the grammar compiler lands (issue: constrained JSON).
#include "pipeline/cli/commands.hpp"

#include <spdlog/spdlog.h>

namespace quarry::cli {

void add_schema_command(CLI::App& app, Context& ctx) {
  auto* sub = app.add_subcommand("schema", "Compile and check JSON Schemas (not built yet)");
  sub->callback([&ctx] {
    spdlog::error("schema: the grammar compiler is not built yet");
    ctx.exit_code = 1;
  });
}

}  // namespace quarry::cli
