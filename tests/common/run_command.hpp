// Running programs from tests: the `quarry` binary under test and reference tools (pdftotext).
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

namespace quarry::test_support {

struct CommandResult {
  int code = -1;     ///< exit status; -1 if the command could not run or was killed by a signal
  std::string out;   ///< what it wrote to stdout (and stderr where the command line merges it)
};

/// Runs `cmd` through /bin/sh and collects its stdout.
inline CommandResult run_command(const std::string& cmd) {
  CommandResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 65536> buf{};
  while (std::size_t n = fread(buf.data(), 1, buf.size(), p)) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

/// Runs the `quarry` program of this build with `args`; its stderr is merged into `out` when
/// `with_stderr`, discarded otherwise.
inline CommandResult run_quarry(const std::string& args, bool with_stderr = true) {
  return run_command(std::string(QUARRY_BINARY_DIR) + "/quarry " + args + (with_stderr ? " 2>&1" : " 2>/dev/null"));
}

/// `pdftotext -layout` of a PDF (one page when page > 0), the reference text layout.
inline CommandResult pdftotext_layout(const std::filesystem::path& pdf, int page = 0) {
  std::string cmd = "pdftotext -layout -enc UTF-8 ";
  if (page > 0) cmd += "-f " + std::to_string(page) + " -l " + std::to_string(page) + " ";
  return run_command(cmd + "'" + pdf.string() + "' - 2>/dev/null");
}

}  // namespace quarry::test_support
