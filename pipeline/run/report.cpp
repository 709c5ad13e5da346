#include "pipeline/run/report.hpp"

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include "pipeline/run/ledger.hpp"
#include "pipeline/run/outdir.hpp"

namespace quarry::run {

using nlohmann::json;

namespace {

std::string fmt(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

}  // namespace

json build_report(const JobSpec& job, const RunMetrics& m) {
  std::map<std::string, std::size_t> by_status, by_method, by_rule;
  std::size_t records = 0, retryable = 0, chunked = 0;
  // The record that counts for each key is its latest line (an error caused by the run's settings is
  // superseded by the record of the run that redid it).
  const std::size_t lines = for_each_current_record(job.output, [&](const std::string& line) {
    const auto j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return;
    ++records;
    ++by_status[j.value("status", "?")];
    if (is_retryable_record(j)) ++retryable;
    // Documents longer than the context, extracted over windows and merged (stats.chunks).
    if (j.contains("stats") && j["stats"].is_object() && j["stats"].contains("chunks") &&
        j["stats"]["chunks"].is_number_unsigned() && j["stats"]["chunks"].get<std::size_t>() > 1)
      ++chunked;
    ++by_method[j["method"].is_string() ? j["method"].get<std::string>() : "none"];
    if (j.contains("errors") && j["errors"].is_array() && j.value("status", "") != "ok") {
      // Count each rule once per record.
      std::map<std::string, bool> seen;
      for (const auto& e : j["errors"]) seen[e.value("rule", "?")] = true;
      for (const auto& [rule, _] : seen) ++by_rule[rule];
    }
  });
  const double wall = m.wall_s > 0 ? m.wall_s : 1e-9;
  json r;
  r["job"] = {{"task", task_name(job.task)},
              {"inputs", job.inputs},
              {"schema", job.task == Task::batch ? std::string("each request's response_format") : job.schema.string()},
              {"model", job.model.string()},
              {"prefer", job.prefer == Prefer::model ? "model" : "auto"},
              {"retries", job.retries}};
  r["records"] = records;
  r["superseded_lines"] = lines > records ? lines - records : 0;
  r["by_status"] = by_status;
  r["errors_retryable"] = retryable;
  r["chunked_documents"] = chunked;
  r["by_method"] = by_method;
  r["failures_by_rule"] = by_rule;
  r["this_run"] = {
      {"wall_s", m.wall_s},
      {"discovered", m.discovered},
      {"written", m.written},
      {"ok", m.ok},
      {"invalid", m.invalid},
      {"error", m.error},
      {"error_retryable", m.retryable},
      {"skipped_already_done", m.skipped},
      {"shard", job.shard_count > 1 ? std::to_string(job.shard_index) + "/" + std::to_string(job.shard_count) : ""},
      {"other_shards", m.other_shards},
      {"cancelled", m.cancelled},
      {"interrupted", m.interrupted},
      {"retries", m.retries},
      {"model_requests", m.model_requests},
      {"docs_per_min", static_cast<double>(m.written) / wall * 60.0},
      {"tokens",
       {{"prompt", m.prompt_tokens},
        {"prefill", m.prefill_tokens},
        {"cached", m.cached_tokens},
        {"decode", m.decode_tokens},
        {"draft", m.draft_tokens},
        {"accepted", m.accepted_tokens}}},
      {"decode_tok_s_wall", static_cast<double>(m.decode_tokens) / wall},
      {"decode_tok_s_engine", m.engine_s > 0 ? static_cast<double>(m.decode_tokens) / m.engine_s : 0.0},
      {"stage_busy_s",
       {{"discover", m.discover_s},
        {"extract", m.extract_s},
        {"build", m.build_s},
        {"engine", m.engine_s},
        {"validate", m.validate_s},
        {"write", m.write_s}}},
      {"recovery",
       {{"recovered_lines", m.recovery.recovered_lines},
        {"truncated_bytes", m.recovery.truncated_bytes},
        {"dropped_rows", m.recovery.dropped_rows}}}};
  return r;
}

json write_report(const JobSpec& job, const RunMetrics& m) {
  const json r = build_report(job, m);
  write_file_atomically(job.output / "report.json", r.dump(2) + "\n");
  const auto& t = r["this_run"];
  std::ostringstream md;
  md << "# quarry run report\n\n";
  md << "Task `" << r["job"]["task"].get<std::string>() << "`, schema `" << r["job"]["schema"].get<std::string>()
     << "`, model `" << r["job"]["model"].get<std::string>() << "`, prefer `" << r["job"]["prefer"].get<std::string>()
     << "`.\n\n";
  md << "## Records in results.jsonl (all runs): " << r["records"].get<std::size_t>() << "\n\n| status | records |\n| --- | ---: |\n";
  for (const auto& [k, v] : r["by_status"].items()) md << "| " << k << " | " << v.get<std::size_t>() << " |\n";
  if (r["errors_retryable"].get<std::size_t>() > 0)
    md << "\nOf the errors, " << r["errors_retryable"].get<std::size_t>()
       << " were caused by the run's settings (KV cache or context too small): the next run redoes them.\n";
  if (r["superseded_lines"].get<std::size_t>() > 0)
    md << "\nresults.jsonl also holds " << r["superseded_lines"].get<std::size_t>()
       << " superseded line(s): records redone by a later run; the latest line of each document counts.\n";
  if (r["chunked_documents"].get<std::size_t>() > 0)
    md << "\n" << r["chunked_documents"].get<std::size_t>()
       << " document(s) were longer than the context: extracted over windows and merged (stats.chunks).\n";
  md << "\n| method | records |\n| --- | ---: |\n";
  for (const auto& [k, v] : r["by_method"].items()) md << "| " << k << " | " << v.get<std::size_t>() << " |\n";
  md << "\n## Failures by rule (records that are not ok)\n\n";
  if (r["failures_by_rule"].empty()) {
    md << "None.\n";
  } else {
    md << "| rule | records |\n| --- | ---: |\n";
    for (const auto& [k, v] : r["failures_by_rule"].items()) md << "| " << k << " | " << v.get<std::size_t>() << " |\n";
  }
  md << "\n## This run\n\n";
  md << "| | |\n| --- | ---: |\n";
  md << "| wall time | " << fmt(t["wall_s"].get<double>(), 2) << " s |\n";
  md << "| " << (job.task == Task::batch ? "request lines found" : "inputs found") << " | "
     << t["discovered"].get<std::size_t>() << " |\n";
  md << "| records written | " << t["written"].get<std::size_t>() << " (ok " << t["ok"].get<std::size_t>() << ", invalid "
     << t["invalid"].get<std::size_t>() << ", error " << t["error"].get<std::size_t>() << ", of which "
     << t["error_retryable"].get<std::size_t>() << " caused by the settings) |\n";
  md << "| skipped (already done) | " << t["skipped_already_done"].get<std::size_t>() << " |\n";
  if (job.shard_count > 1)
    md << "| shard " << t["shard"].get<std::string>() << ": documents of the other shards | "
       << t["other_shards"].get<std::size_t>() << " |\n";
  md << "| cancelled | " << t["cancelled"].get<std::size_t>() << " |\n";
  md << "| documents per minute | " << fmt(t["docs_per_min"].get<double>(), 1) << " |\n";
  md << "| model requests (incl. " << t["retries"].get<std::size_t>() << " retries) | "
     << t["model_requests"].get<std::size_t>() << " |\n";
  md << "| prompt / prefill / cached / decode tokens | " << t["tokens"]["prompt"].get<std::uint64_t>() << " / "
     << t["tokens"]["prefill"].get<std::uint64_t>() << " / " << t["tokens"]["cached"].get<std::uint64_t>() << " / "
     << t["tokens"]["decode"].get<std::uint64_t>() << " |\n";
  md << "| decode tok/s (wall / engine busy) | " << fmt(t["decode_tok_s_wall"].get<double>(), 1) << " / "
     << fmt(t["decode_tok_s_engine"].get<double>(), 1) << " |\n";
  md << "\n### Busy time per stage (seconds, summed over the stage's threads)\n\n| stage | s |\n| --- | ---: |\n";
  for (const char* s : {"discover", "extract", "build", "engine", "validate", "write"})
    md << "| " << s << " | " << fmt(t["stage_busy_s"][s].get<double>(), 3) << " |\n";
  write_file_atomically(job.output / "report.md", md.str());
  return r;
}

}  // namespace quarry::run
