// Helpers of the hostile-input suite (on top of tests/run/run_support.hpp).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>

#include "tests/run/run_support.hpp"

namespace quarry::test_hostile {

namespace fs = std::filesystem;
using nlohmann::json;

inline const fs::path k_samples = fs::path(QUARRY_SOURCE_DIR) / "samples" / "invoices";

/// `quarry run INPUTS -o OUT` with quiet progress, 2 engine threads and no retries, then `extra`.
inline std::vector<std::string> run_args(const std::vector<fs::path>& in, const fs::path& out,
                                         std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {"run"};
  for (const auto& p : in) a.push_back(p.string());
  a.insert(a.end(), {"-o", out.string(), "--progress", "none", "--threads", "2", "--retries", "0"});
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

/// Lets a SIGSEGV sent to a child process end it with that signal in sanitizer builds too: AddressSanitizer
/// otherwise catches the signal in the child, prints a report and exits with status 1. Children inherit the
/// environment, so this holds for the extraction workers that `quarry` starts as well.
inline void let_sigsegv_end_children() {
  const char* old = std::getenv("ASAN_OPTIONS");
  std::string v = old != nullptr && *old != '\0' ? std::string(old) + ":handle_segv=0" : "handle_segv=0";
  ::setenv("ASAN_OPTIONS", v.c_str(), 1);
}

/// Waits up to `limit` for the child; SIGKILLs it after that (and fails the test). Returns its status
/// as test_run::wait_child does.
inline int wait_child_for(pid_t pid, std::chrono::seconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!test_run::exited(pid) && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (!test_run::exited(pid)) {
    ADD_FAILURE() << "still running after " << limit.count() << " s: killed";
    ::kill(pid, SIGKILL);
  }
  return test_run::wait_child(pid);
}

/// Every line of `results` parses, and each input has exactly one record.
inline std::map<std::string, json> expect_one_record_each(const fs::path& results, const std::vector<fs::path>& inputs) {
  std::map<std::string, json> by_source;
  std::ifstream in(results, std::ios::binary);
  std::string line;
  while (std::getline(in, line)) {
    const auto j = json::parse(line, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << "garbled line: " << line.substr(0, 200);
    if (j.is_discarded()) continue;
    EXPECT_TRUE(by_source.emplace(j["source"].get<std::string>(), j).second) << "duplicate record: " << j["source"];
  }
  EXPECT_EQ(by_source.size(), inputs.size());
  for (const auto& p : inputs) EXPECT_TRUE(by_source.count(p.string())) << "no record for " << p;
  return by_source;
}

}  // namespace quarry::test_hostile
