// The `quarry` program's global behaviour: --help, --version, usage errors and their exit codes.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>
#include <sys/wait.h>

#include "tests/common/run_command.hpp"
#include "quarry/version.hpp"

namespace {

using Run = quarry::test_support::CommandResult;

Run run(const std::string& args) { return quarry::test_support::run_quarry(args, true); }

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
