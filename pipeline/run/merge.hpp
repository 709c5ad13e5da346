// `quarry merge`: the output folders of a sharded job (`quarry run --shard I/N`, one run per shard, e.g.
// a Slurm array or a Kubernetes indexed job) combined into one output folder: results.jsonl, the ledger
// and the report, exactly once, so that the result reads like one run's and a later `quarry run` into it
// resumes like any other.
//
// Each input folder is locked (OutdirLock: a shard still running is refused) and its ledger opened,
// which repairs it as a rerun would (ledger.hpp: complete lines a kill left unrecorded are taken in, a
// torn last line is cut). Its current records (the latest line of each (record key, sha256) row) are
// then committed to the output through the ledger's own commit protocol. A record key and sha256 found
// in two input folders means the inputs overlap (the same shard given twice, or a shard and an unsharded
// run): the merge is refused before anything is written.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace quarry::run {

struct MergeResult {
  std::size_t records = 0;                         ///< records in the merged folder
  std::map<std::string, std::size_t> by_status;    ///< ok / invalid / error
  std::vector<std::size_t> per_input;              ///< records taken from each input folder
};

/// Merges `inputs` (output folders of runs) into `output` (created if missing; it must not hold results
/// yet and must not be one of the inputs). Writes results.jsonl, ledger.sqlite, report.json and report.md.
/// Throws std::runtime_error naming the folder or file on a missing or unreadable input, overlapping
/// inputs, a non-empty output, and OutdirBusy (outdir.hpp) when a folder is in use by a run.
MergeResult merge_outputs(const std::vector<std::filesystem::path>& inputs, const std::filesystem::path& output,
                          const std::function<void(const std::string&)>& log = {});

}  // namespace quarry::run
