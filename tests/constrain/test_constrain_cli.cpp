// `quarry generate --json-schema FILE` and the default model (no --model), through the built program:
// the output parses and valijson accepts it; a schema the compiler rejects exits 1 with its message;
// --lenient turns that into a warning.
#pragma GCC diagnostic ignored "-Wrestrict"  // GCC 12 false positive inside valijson (Release)

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <valijson/adapters/nlohmann_json_adapter.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validator.hpp>

#include "tests/common/run_command.hpp"
#include "tests/common/scratch.hpp"

namespace fs = std::filesystem;

namespace {

const fs::path kSource = QUARRY_SOURCE_DIR;

using Run = quarry::test_support::CommandResult;

/// Runs the quarry program from the source root (stdout; stderr too if asked).
Run run(const std::string& args, bool with_stderr = false) {
  return quarry::test_support::run_command("cd '" + kSource.string() + "' && " + std::string(QUARRY_BINARY_DIR) +
                                           "/quarry " + args + (with_stderr ? " 2>&1" : " 2>/dev/null"));
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

fs::path scratch() {
  static const fs::path p = quarry::test_support::scratch_dir("constrain_cli");
  return p;
}

/// Messages file: the default model's KIE prompt over a sample invoice's text.
fs::path invoice_messages(const fs::path& dir) {
  const auto prompts = nlohmann::json::parse(read_file(kSource / "models/quarry-extract-11m/prompts.json"));
  const std::string doc = read_file(kSource / "samples/invoices/en-txt-1.txt");
  nlohmann::json m = nlohmann::json::array(
      {{{"role", "system"}, {"content", prompts["kie"]["system"]}}, {{"role", "user"}, {"content", doc}}});
  const auto path = dir / "messages.json";
  std::ofstream(path) << m.dump();
  return path;
}

TEST(ConstrainCli, InvoiceSchemaOutputValidatesWithDefaultModel) {
  const auto dir = scratch();
  const auto messages = invoice_messages(dir);
  for (const char* extra : {"", " --jump-forward", " --temperature 1 --seed 5"}) {
    SCOPED_TRACE(extra);
    const auto r = run("generate --messages " + messages.string() +
                       " --json-schema schemas/invoice.schema.json --max-tokens 1500" + extra);
    ASSERT_EQ(r.code, 0) << r.out;
    nlohmann::json instance;
    ASSERT_NO_THROW(instance = nlohmann::json::parse(r.out)) << r.out;
    const auto schema_json = nlohmann::json::parse(read_file(kSource / "schemas/invoice.schema.json"));
    valijson::Schema schema;
    valijson::SchemaParser parser;
    valijson::adapters::NlohmannJsonAdapter sa(schema_json);
    parser.populateSchema(sa, schema);
    valijson::Validator validator;
    valijson::adapters::NlohmannJsonAdapter ta(instance);
    EXPECT_TRUE(validator.validate(schema, ta, nullptr)) << r.out;
  }
  fs::remove_all(dir);
}

TEST(ConstrainCli, UnsupportedSchemaFailsWithTheCompilersMessage) {
  const auto dir = scratch();
  const auto schema = dir / "bad.schema.json";
  std::ofstream(schema) << R"({"type": "object", "unevaluatedProperties": false})";
  auto r = run("generate --prompt hi --json-schema " + schema.string(), true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("unsupported keyword 'unevaluatedProperties'"), std::string::npos) << r.out;
  r = run("generate --prompt hi --max-tokens 4 --lenient --json-schema " + schema.string(), true);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("ignored"), std::string::npos) << r.out;
  fs::remove_all(dir);
}

TEST(ConstrainCli, TokenizeUsesTheDefaultModel) {
  const auto with = run("tokenize --model models/quarry-extract-11m 'Invoice INV-07133'");
  const auto without = run("tokenize 'Invoice INV-07133'");
  EXPECT_EQ(without.code, 0);
  EXPECT_EQ(without.out, with.out);
  EXPECT_TRUE(nlohmann::json::parse(without.out).is_array());
  // A missing default model is a clear error naming the folder.
  const std::string cmd = "QUARRY_HOME=/nonexistent-quarry-home " + std::string(QUARRY_BINARY_DIR) + "/quarry tokenize x 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 1024> buf{};
  while (std::size_t n = fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  const int status = pclose(p);
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_NE(out.find("nonexistent-quarry-home/models/quarry-extract-11m"), std::string::npos) << out;
}

}  // namespace
