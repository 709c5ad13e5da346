#include "pipeline/run/merge.hpp"

#include <chrono>
#include <memory>
#include <stdexcept>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "pipeline/run/job.hpp"
#include "pipeline/run/ledger.hpp"
#include "pipeline/run/outdir.hpp"
#include "pipeline/run/report.hpp"
#include "pipeline/run/runner.hpp"

namespace quarry::run {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

/// The ledger's row of a record line (what Ledger::commit takes), for the row (key, sha256).
PendingRecord pending_of(const std::string& key, const std::string& sha256, const std::string& line,
                         const fs::path& folder) {
  const auto j = json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw std::runtime_error((folder / Ledger::results_name).string() + ": a record line does not parse (" + key + ")");
  PendingRecord p;
  p.source = key;
  p.sha256 = sha256;
  p.status = j.value("status", "");
  p.method = j.contains("method") && j["method"].is_string() ? j["method"].get<std::string>() : "";
  p.attempts = j.contains("stats") && j["stats"].is_object() ? j["stats"].value("attempts", std::size_t{0}) : 0;
  p.retryable = is_retryable_record(j);
  p.line = line;
  return p;
}

}  // namespace

MergeResult merge_outputs(const std::vector<fs::path>& inputs, const fs::path& output,
                          const std::function<void(const std::string&)>& log) {
  const auto t0 = std::chrono::steady_clock::now();
  if (inputs.empty()) throw std::runtime_error("merge: no input folders");
  for (const auto& in : inputs) {
    if (!fs::is_directory(in)) throw std::runtime_error(in.string() + ": not a folder");
    if (!fs::exists(in / Ledger::results_name) || !fs::exists(in / Ledger::ledger_name))
      throw std::runtime_error(in.string() + ": not the output folder of a run (no " + Ledger::results_name + " and " +
                               Ledger::ledger_name + ")");
    if (fs::exists(output) && fs::equivalent(in, output))
      throw std::runtime_error(output.string() + ": the output folder is one of the inputs");
  }
  for (std::size_t i = 0; i < inputs.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (fs::equivalent(inputs[i], inputs[j])) throw std::runtime_error(inputs[i].string() + ": given twice");
  const OutdirLock out_lock(output);
  if (fs::exists(output / Ledger::results_name) && fs::file_size(output / Ledger::results_name) > 0)
    throw std::runtime_error(output.string() + ": already holds results (merge into an empty folder)");

  // Lock and repair every input, then check that no (record key, sha256) is in two of them.
  std::vector<std::unique_ptr<OutdirLock>> locks;
  for (const auto& in : inputs) {
    locks.push_back(std::make_unique<OutdirLock>(in));
    const Ledger repair(in);
    const Recovery& r = repair.recovery();
    if (log && (r.recovered_lines || r.truncated_bytes || r.dropped_rows))
      log(in.string() + ": repaired as a rerun would (" + std::to_string(r.recovered_lines) + " lines recovered, " +
          std::to_string(r.truncated_bytes) + " torn bytes cut, " + std::to_string(r.dropped_rows) + " rows dropped)");
  }
  std::unordered_map<std::string, std::size_t> origin;  // key + '\n' + sha256 -> input index
  for (std::size_t i = 0; i < inputs.size(); ++i)
    for_each_current_row(inputs[i], [&](const std::string& key, const std::string& sha, const std::string&) {
      const auto [it, fresh] = origin.emplace(key + '\n' + sha, i);
      if (!fresh)
        throw std::runtime_error("merge: " + key + " is in both " + inputs[it->second].string() + " and " +
                                 inputs[i].string() + ": the inputs overlap (give each shard's folder once)");
    });

  MergeResult result;
  Ledger ledger(output);
  for (const auto& in : inputs) {
    std::size_t taken = 0;
    std::vector<PendingRecord> group;
    const auto flush = [&] {
      if (group.empty()) return;
      ledger.commit(group);
      group.clear();
    };
    for_each_current_row(in, [&](const std::string& key, const std::string& sha, const std::string& line) {
      group.push_back(pending_of(key, sha, line, in));
      ++result.by_status[group.back().status];
      ++taken;
      if (group.size() >= 1024) flush();
    });
    flush();
    result.per_input.push_back(taken);
    result.records += taken;
  }

  // The report of the merged folder (counts read back from it; "this run" is the merge).
  JobSpec job;
  job.output = output;
  for (const auto& in : inputs) job.inputs.push_back(in.string());
  RunMetrics m;
  m.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  m.written = result.records;
  m.ok = result.by_status["ok"];
  m.invalid = result.by_status["invalid"];
  m.error = result.by_status["error"];
  write_report(job, m);
  return result;
}

}  // namespace quarry::run
