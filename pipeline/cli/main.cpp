// Entry point of the `quarry` program: global options, logging, subcommand dispatch.
#include <spdlog/spdlog.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <exception>
#include <string>

#include "pipeline/cli/commands.hpp"
#include "pipeline/extract/extractor.hpp"
#include "quarry/version.hpp"

int main(int argc, char** argv) {
  // `quarry extract-worker FD`: an extraction worker process started by quarry itself
  // (pipeline/extract/extractor.hpp); not a user command, so not in --help.
  if (const auto status = quarry::extract::maybe_run_worker(argc, argv)) return *status;
  CLI::App app{"quarry: batch document extraction with an embedded LLM engine"};
  app.set_version_flag("--version", std::string("quarry ") + QUARRY_VERSION);
  app.require_subcommand(1);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, critical or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}))
      ->capture_default_str();
  app.footer(
      "Exit codes: 0 success; 1 usage or setup error; 2 some inputs failed (reported in the output);\n"
      "3 a check said no. Run `quarry SUBCOMMAND --help` for each subcommand.");

  quarry::cli::Context ctx;
  ctx.argv.assign(argv, argv + argc);
  quarry::cli::add_ingest_command(app, ctx);
  quarry::cli::add_generate_command(app, ctx);
  quarry::cli::add_tokenize_command(app, ctx);
  quarry::cli::add_schema_command(app, ctx);
  quarry::cli::add_run_command(app, ctx);
  quarry::cli::add_ask_command(app, ctx);
  quarry::cli::add_bench_command(app, ctx);
  quarry::cli::add_merge_command(app, ctx);
  quarry::cli::add_serve_command(app, ctx);
  quarry::cli::add_quantize_command(app, ctx);
  quarry::cli::add_queue_commands(app, ctx);

  // Logs go to stderr so that stdout carries only results (JSON lines, token ids).
  auto logger = spdlog::stderr_color_mt("quarry");
  spdlog::set_default_logger(logger);
  app.parse_complete_callback([&] { spdlog::set_level(spdlog::level::from_str(log_level)); });

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help / --version exit 0; every usage error exits 1 (CLI11's own codes are 100+).
    return app.exit(e) == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
  return ctx.exit_code;
}
