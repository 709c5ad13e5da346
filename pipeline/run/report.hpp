// The run report: OUTDIR/report.json and OUTDIR/report.md.
//
// Counts by status and method and failures by rule are read back from results.jsonl (so they cover
// every record of the output folder, across resumed runs; one line at a time): the latest line of each
// record key, the one its ledger row points at (a record redone by a later run supersedes the earlier
// line). Errors caused by the run's settings are counted apart (errors_retryable). Throughput, time
// per stage and token totals are this run's (RunMetrics). Records of --cross-check add "cross_check":
// documents cross-checked (and with a disagreement), fields compared / agreeing / disagreeing / only
// in the model's output, and the same per field ("/line_items/*/net_amount"), summed over the records.
#pragma once

#include <filesystem>

#include <nlohmann/json.hpp>

#include "pipeline/run/job.hpp"
#include "pipeline/run/runner.hpp"

namespace quarry::run {

/// Builds the report object (see write_report). Throws std::runtime_error if results.jsonl cannot be read.
nlohmann::json build_report(const JobSpec& job, const RunMetrics& m);

/// Writes report.json and report.md into job.output (each written to a temporary file, then renamed);
/// returns the report object.
nlohmann::json write_report(const JobSpec& job, const RunMetrics& m);

}  // namespace quarry::run
