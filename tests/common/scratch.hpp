// Scratch folders for tests that write files (checkpoints, job outputs): one per name and process,
// under the build tree, removed when the process exits so that repeated and parallel runs do not fill
// the disk.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

namespace quarry::test_support {

namespace detail {
/// The folders this process made; removed (best effort) when static objects are destroyed at exit.
struct ScratchRegistry {
  std::mutex mu;
  std::vector<std::filesystem::path> dirs;
  ~ScratchRegistry() {
    if (std::getenv("QUARRY_KEEP_TEST_SCRATCH")) return;  // for looking at a failing test's files
    std::error_code ec;
    for (const auto& d : dirs) std::filesystem::remove_all(d, ec);
  }
};
inline ScratchRegistry& scratch_registry() {
  static ScratchRegistry r;
  return r;
}
}  // namespace detail

/// `<build>/test_scratch/<name>_<pid>`, emptied first and removed at process exit (unless the
/// environment sets QUARRY_KEEP_TEST_SCRATCH). The process id is part of the name: ctest runs each test
/// in its own process, possibly in parallel, and two of them must never share a folder.
inline std::filesystem::path scratch_dir(const std::string& name) {
  auto p = std::filesystem::path(QUARRY_BINARY_DIR) / "test_scratch" / (name + "_" + std::to_string(::getpid()));
  auto& reg = detail::scratch_registry();
  {
    std::lock_guard lock(reg.mu);
    reg.dirs.push_back(p);
  }
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p;
}

}  // namespace quarry::test_support
