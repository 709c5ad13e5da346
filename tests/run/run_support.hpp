// Helpers of the quarry run tests: scratch folders, results.jsonl reading, spawning quarry with a pid.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace quarry::test_run {

namespace fs = std::filesystem;

/// A fresh folder under the temp dir, unique per process and name; removed on destruction.
struct Scratch {
  fs::path dir;
  explicit Scratch(const std::string& name) {
    dir = fs::temp_directory_path() / ("quarry_run_test_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

inline std::vector<nlohmann::json> read_records(const fs::path& results) {
  std::vector<nlohmann::json> out;
  std::ifstream in(results, std::ios::binary);
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

inline std::size_t count_lines(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::size_t n = 0;
  std::string line;
  while (std::getline(in, line))
    if (!in.eof()) ++n;
  return n;
}

inline std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// Starts `quarry args...` with stdout/stderr to `log`; returns its pid.
inline pid_t spawn_quarry(const std::vector<std::string>& args, const fs::path& log) {
  std::vector<std::string> argv_s = {std::string(QUARRY_BINARY_DIR) + "/quarry", "--log-level", "warn"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  if (posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

/// Waits for the child; returns its exit code, or 128 + signal when killed. `max_rss_kib`: its peak RSS.
inline int wait_child(pid_t pid, long* max_rss_kib = nullptr) {
  int status = 0;
  rusage ru{};
  if (::wait4(pid, &status, 0, &ru) != pid) return -1;
  if (max_rss_kib) *max_rss_kib = ru.ru_maxrss;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

/// Runs quarry to completion; returns the exit code.
inline int run_quarry_args(const std::vector<std::string>& args, const fs::path& log, long* max_rss_kib = nullptr) {
  const pid_t pid = spawn_quarry(args, log);
  return pid < 0 ? -1 : wait_child(pid, max_rss_kib);
}

/// `n` copies of the XML e-invoice samples under distinct names in `dir` (structured inputs: the
/// mapper path, fast), cycling through the samples.
inline std::vector<fs::path> make_copies(const fs::path& dir, std::size_t n) {
  std::vector<fs::path> src;
  for (const auto& e : fs::directory_iterator(fs::path(QUARRY_SOURCE_DIR) / "samples" / "invoices"))
    if (e.path().extension() == ".xml") src.push_back(e.path());
  std::sort(src.begin(), src.end());
  fs::create_directories(dir);
  std::vector<fs::path> out;
  for (std::size_t i = 0; i < n; ++i) {
    const auto p = dir / ("copy-" + std::to_string(i) + ".xml");
    fs::copy_file(src[i % src.size()], p, fs::copy_options::overwrite_existing);
    out.push_back(p);
  }
  return out;
}

/// Whether the child has exited (a zombie not yet waited for); does not reap it.
inline bool exited(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(in, stat);
  const auto close = stat.rfind(')');
  return close == std::string::npos || (close + 2 < stat.size() && stat[close + 2] == 'Z');
}

/// Polls until `results` has at least `lines` complete lines, the child exits, or `timeout` passes.
inline bool wait_for_lines(pid_t pid, const fs::path& results, std::size_t lines, std::chrono::seconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (count_lines(results) >= lines) return true;
    if (exited(pid)) return count_lines(results) >= lines;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

}  // namespace quarry::test_run
