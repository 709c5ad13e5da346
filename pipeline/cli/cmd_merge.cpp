// `quarry merge OUT1 OUT2 ... -o OUT`: the output folders of a sharded job (`quarry run --shard I/N`)
// combined into one (pipeline/run/merge.hpp).
//
// Exit codes: 0 merged, every record ok; 2 merged, some records invalid or error, or a folder is in use
// by a run; 1 anything else (a missing input, overlapping inputs, an output that already holds results).
#include <spdlog/spdlog.h>

#include <memory>
#include <string>
#include <vector>

#include "pipeline/cli/commands.hpp"
#include "pipeline/run/merge.hpp"
#include "pipeline/run/outdir.hpp"

namespace quarry::cli {

void add_merge_command(CLI::App& app, Context& ctx) {
  struct Args {
    std::vector<std::string> inputs;
    std::string output;
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand("merge",
                                 "Combine the output folders of a sharded job (quarry run --shard I/N) into one: "
                                 "results.jsonl, ledger and report, exactly once");
  sub->add_option("inputs", a->inputs, "Output folders of the shards' runs")->required()->check(CLI::ExistingDirectory);
  sub->add_option("-o,--output", a->output, "The merged output folder (new or empty)")->required();
  sub->callback([a, &ctx] {
    try {
      std::vector<std::filesystem::path> in(a->inputs.begin(), a->inputs.end());
      const auto r = run::merge_outputs(in, a->output, [](const std::string& m) { spdlog::info("{}", m); });
      std::string per;
      for (std::size_t i = 0; i < r.per_input.size(); ++i)
        per += (i ? ", " : "") + std::to_string(r.per_input[i]);
      const std::size_t ok = r.by_status.count("ok") ? r.by_status.at("ok") : 0;
      spdlog::info("merged {} records ({} from the inputs in order; {} ok) into {}", r.records, per, ok, a->output);
      ctx.exit_code = ok == r.records ? 0 : 2;
    } catch (const run::OutdirBusy& e) {
      spdlog::error("merge: {}", e.what());
      ctx.exit_code = 2;
    } catch (const std::exception& e) {
      spdlog::error("merge: {}", e.what());
      ctx.exit_code = 1;
    }
  });
}

}  // namespace quarry::cli
