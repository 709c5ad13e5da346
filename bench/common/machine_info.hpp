// What a bench report records about where it ran: the CPU model and the source revision.
// Header-only, for bench executables compiled with QUARRY_SOURCE_DIR defined.
#pragma once

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

namespace quarry::bench {

/// The "model name" line of /proc/cpuinfo, or "unknown".
inline std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

/// Short git revision of the source tree with "-dirty" when the tree has changes not committed (a copy
/// of a working tree), or "unknown" (not a git checkout, or git missing).
inline std::string git_commit() {
  FILE* p = popen("git -C " QUARRY_SOURCE_DIR " describe --always --dirty --abbrev=7 2>/dev/null", "r");
  if (!p) return "unknown";
  char buf[64] = {};
  std::string s = fgets(buf, sizeof buf, p) ? buf : "unknown";
  pclose(p);
  s.erase(std::remove(s.begin(), s.end(), '\n'), s.end());
  return s;
}

}  // namespace quarry::bench
