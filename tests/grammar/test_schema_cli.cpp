// `quarry schema` subcommands: exit codes and output.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/wait.h>

#include "tests/common/run_command.hpp"

namespace {

using Run = quarry::test_support::CommandResult;

Run run(const std::string& args) { return quarry::test_support::run_quarry(args, true); }

std::string write(const std::string& name, const std::string& text) {
  auto dir = std::filesystem::temp_directory_path() / "quarry_schema_cli";
  std::filesystem::create_directories(dir);
  auto p = dir / name;
  std::ofstream(p) << text;
  return p.string();
}

}  // namespace

TEST(SchemaCli, CompilePrintsStatisticsOrError) {
  std::string s = write("s.json", R"({"type":"object","properties":{"a":{"type":"integer"}}})");
  auto r = run("schema compile " + s);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("nodes:"), std::string::npos) << r.out;
  std::string bad = write("bad.json", R"({"properties":{"x":{"unevaluatedProperties":false}}})");
  r = run("schema compile " + bad);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("/properties/x/unevaluatedProperties"), std::string::npos) << r.out;
  r = run("schema compile " + bad + " --lenient");
  EXPECT_EQ(r.code, 0) << r.out;
}

TEST(SchemaCli, CheckInstanceKeepsKeyOrder) {
  std::string s = write("o.json", R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},"additionalProperties":false})");
  std::string in_order = write("i1.json", R"({"a": 1, "b": "x"})");
  std::string swapped = write("i2.json", R"({"b": "x", "a": 1})");
  std::string wrong = write("i3.json", R"({"a": "1"})");
  auto r = run("schema check-instance --schema " + s + " --instance " + in_order);
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("accepted"), std::string::npos);
  r = run("schema check-instance --schema " + s + " --instance " + swapped);
  EXPECT_EQ(r.code, 3);
  EXPECT_NE(r.out.find("rejected"), std::string::npos);
  r = run("schema check-instance --schema " + s + " --instance " + swapped + " --any-key-order");
  EXPECT_EQ(r.code, 0);
  r = run("schema check-instance --schema " + s + " --instance " + wrong);
  EXPECT_EQ(r.code, 3);
}

TEST(SchemaCli, CompileRefusesRefCyclesAndOversizedSchemasNamingTheFile) {
  std::string s = write("cycle.json", R"({"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"allOf":[{"$ref":"#/$defs/a"}]}},"$ref":"#/$defs/a"})");
  auto r = run("schema compile " + s);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find(s + ": /$defs/a: $ref cycle that makes no progress: /$defs/a -> /$defs/b -> /$defs/b/allOf/0 -> /$defs/a"),
            std::string::npos)
      << r.out;
  std::string wide = R"({"type":"object","properties":{)";
  for (int i = 0; i < 20001; ++i) wide += (i ? ",\"p" : "\"p") + std::to_string(i) + R"(":{"type":"string"})";
  wide += "}}";
  s = write("wide.json", wide);
  r = run("schema compile " + s);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find(s + ": /properties: an object with more than 20000 keys"), std::string::npos) << r.out;
}
