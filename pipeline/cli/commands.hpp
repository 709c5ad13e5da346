// The `quarry` command-line program: one file per subcommand, each adding itself to the app.
//
// Exit codes (all subcommands): 0 success; 1 usage error or unrecoverable setup failure;
// 2 the command ran but some inputs failed (each failure is reported in the output);
// 3 a check said "no" (e.g. `schema check-instance` rejected the instance).
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace quarry::cli {

/// Shared state of one invocation. A subcommand's callback stores its exit code here.
struct Context {
  int exit_code = 0;
  std::vector<std::string> argv;  ///< the command line as given (for "rerun this to resume" hints)
};

void add_ingest_command(CLI::App& app, Context& ctx);
void add_generate_command(CLI::App& app, Context& ctx);
void add_tokenize_command(CLI::App& app, Context& ctx);
void add_schema_command(CLI::App& app, Context& ctx);
void add_run_command(CLI::App& app, Context& ctx);
void add_ask_command(CLI::App& app, Context& ctx);
void add_bench_command(CLI::App& app, Context& ctx);
void add_merge_command(CLI::App& app, Context& ctx);
void add_serve_command(CLI::App& app, Context& ctx);
void add_quantize_command(CLI::App& app, Context& ctx);
/// `quarry submit`, `quarry worker`, `quarry collect` (cmd_queue.cpp).
void add_queue_commands(CLI::App& app, Context& ctx);

}  // namespace quarry::cli
