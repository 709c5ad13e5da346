// The `quarry` program's global behaviour: --help, --version, usage errors and their exit codes.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>
#include <sys/wait.h>

#include "quarry/version.hpp"

namespace {

struct Run {
  int code;
  std::string out;
};

Run run(const std::string& args) {
  std::string cmd = std::string(QUARRY_BINARY_DIR) + "/quarry " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf{};
  while (std::size_t n = fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace

TEST(Cli, VersionPrintsProjectVersion) {
  auto r = run("--version");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find(QUARRY_VERSION), std::string::npos) << r.out;
}

TEST(Cli, HelpListsSubcommands) {
  auto r = run("--help");
  EXPECT_EQ(r.code, 0);
  for (const char* sub : {"ingest", "generate", "tokenize", "schema"})
    EXPECT_NE(r.out.find(sub), std::string::npos) << sub << " missing from:\n" << r.out;
}

TEST(Cli, UnknownOptionIsUsageError) {
  auto r = run("--no-such-option");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.code, 2);
}

TEST(Cli, MissingSubcommandIsUsageError) {
  auto r = run("");
  EXPECT_NE(r.code, 0);
}
