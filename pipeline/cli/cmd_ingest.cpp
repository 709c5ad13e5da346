// `quarry ingest`: placeholder until the extractors land (issue: ingest).
#include "pipeline/cli/commands.hpp"

#include <spdlog/spdlog.h>

namespace quarry::cli {

void add_ingest_command(CLI::App& app, Context& ctx) {
  auto* sub = app.add_subcommand("ingest", "Extract documents to JSON lines (not built yet)");
  sub->callback([&ctx] {
    spdlog::error("ingest: not built yet");
    ctx.exit_code = 1;
  });
}

}  // namespace quarry::cli
