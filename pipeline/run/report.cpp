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

/// The cross-check counts over the records that carry a `cross_check` member (records.hpp add_cross_check).
struct CrossCheckTally {
  std::size_t documents = 0, compared_documents = 0, disagreeing_documents = 0;
  std::size_t compared = 0, agreeing = 0, disagreeing = 0, model_only = 0;
  std::map<std::string, std::map<std::string, std::size_t>> by_field;  // field -> outcome -> count

  static std::size_t count(const json& c, const char* key) {
    const auto it = c.find(key);
    return it != c.end() && it->is_number_unsigned() ? it->get<std::size_t>() : 0;
  }
  void add(const json& c) {
    ++documents;
    if (c.contains("skipped")) return;
    ++compared_documents;
    compared += count(c, "fields_compared");
    agreeing += count(c, "fields_agreeing");
    disagreeing += count(c, "fields_disagreeing");
    model_only += count(c, "fields_model_only");
    if (count(c, "fields_disagreeing") > 0) ++disagreeing_documents;
    if (const auto f = c.find("by_field"); f != c.end() && f->is_object())
      for (const auto& [field, outcomes] : f->items())
        for (const char* o : {"agree", "disagree", "model_only"}) by_field[field][o] += count(outcomes, o);
  }
  json to_json() const {
    json fields = json::object();
    for (const auto& [field, o] : by_field) {
      const std::size_t agree = o.count("agree") ? o.at("agree") : 0, disagree = o.count("disagree") ? o.at("disagree") : 0,
                        only = o.count("model_only") ? o.at("model_only") : 0;
      fields[field] = {{"compared", agree + disagree}, {"agree", agree}, {"disagree", disagree}, {"model_only", only}};
    }
    return {{"documents", documents},
            {"documents_compared", compared_documents},
            {"documents_disagreeing", disagreeing_documents},
            {"fields_compared", compared},
            {"fields_agreeing", agreeing},
            {"fields_disagreeing", disagreeing},
            {"fields_model_only", model_only},
            {"by_field", fields}};
  }
};

}  // namespace

json build_report(const JobSpec& job, const RunMetrics& m) {
  std::map<std::string, std::size_t> by_status, by_method, by_rule;
  std::size_t records = 0, retryable = 0, chunked = 0;
  CrossCheckTally cross;
  // The record that counts for each key is its latest line (an error caused by the run's settings is
  // superseded by the record of the run that redid it).
  const std::size_t lines = for_each_current_record(job.output, [&](const std::string& line) {
    const auto j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return;
    ++records;
    ++by_status[j.value("status", "?")];
    if (is_retryable_record(j)) ++retryable;
    if (const auto c = j.find("cross_check"); c != j.end() && c->is_object()) cross.add(*c);
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
              {"cross_check", job.cross_check},
              {"retries", job.retries}};
  r["records"] = records;
  r["superseded_lines"] = lines > records ? lines - records : 0;
  r["by_status"] = by_status;
  r["errors_retryable"] = retryable;
  r["chunked_documents"] = chunked;
  r["by_method"] = by_method;
  r["failures_by_rule"] = by_rule;
  if (cross.documents > 0) r["cross_check"] = cross.to_json();
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
     << "`" << (job.cross_check ? ", cross-check against e-invoice XML" : "") << ".\n\n";
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
       << " document(s) were longer than the context, or their output longer than --max-tokens (stats.output_splits):"
          " extracted over windows and merged (stats.chunks).\n";
  md << "\n| method | records |\n| --- | ---: |\n";
  for (const auto& [k, v] : r["by_method"].items()) md << "| " << k << " | " << v.get<std::size_t>() << " |\n";
  md << "\n## Failures by rule (records that are not ok)\n\n";
  if (r["failures_by_rule"].empty()) {
    md << "None.\n";
  } else {
    md << "| rule | records |\n| --- | ---: |\n";
    for (const auto& [k, v] : r["failures_by_rule"].items()) md << "| " << k << " | " << v.get<std::size_t>() << " |\n";
  }
  if (r.contains("cross_check")) {
    const auto& c = r["cross_check"];
    md << "\n## Cross-check against the e-invoice XML (records of --prefer model --cross-check)\n\n";
    md << "Documents cross-checked: " << c["documents_compared"].get<std::size_t>();
    if (c["documents_compared"] != c["documents"])
      md << " of " << c["documents"].get<std::size_t>() << " (the others' model output was not a JSON object)";
    md << "; with a disagreement: " << c["documents_disagreeing"].get<std::size_t>() << ". Fields compared: "
       << c["fields_compared"].get<std::size_t>() << ", agreeing " << c["fields_agreeing"].get<std::size_t>()
       << ", disagreeing " << c["fields_disagreeing"].get<std::size_t>() << "; values only the model gave (the XML has "
       << "none): " << c["fields_model_only"].get<std::size_t>() << ".\n\n";
    md << "| field | compared | agree | disagree | model only |\n| --- | ---: | ---: | ---: | ---: |\n";
    for (const auto& [k, v] : c["by_field"].items())
      md << "| `" << k << "` | " << v["compared"].get<std::size_t>() << " | " << v["agree"].get<std::size_t>() << " | "
         << v["disagree"].get<std::size_t>() << " | " << v["model_only"].get<std::size_t>() << " |\n";
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
