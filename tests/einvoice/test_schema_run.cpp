// `quarry run --schema` with hostile schemas and e-invoices (the hardening issue's cases, end to
// end): $ref cycles are refused before the run with the file and the JSON pointer; a pattern with
// nested quantifiers over an invoice number of 40 letters + '!' and of 100,003 characters gives a
// record within seconds. The UBL invoices are made here from a sample.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <vector>

#include <unistd.h>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/common/run_command.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

fs::path temp_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("quarry_schema_run_" + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void write(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

// The sample UBL invoice with its invoice number (the first cbc:ID) replaced.
std::string ubl_with_id(const std::string& id) {
  std::string xml = read(fs::path(QUARRY_SOURCE_DIR) / "samples/invoices/en-xml-1.xml");
  const std::string open = "<cbc:ID>", close = "</cbc:ID>";
  const auto a = xml.find(open);
  const auto b = xml.find(close, a);
  EXPECT_NE(a, std::string::npos);
  return xml.substr(0, a + open.size()) + id + xml.substr(b);
}

std::vector<json> records(const fs::path& out) {
  std::vector<json> r;
  std::ifstream in(out / "results.jsonl");
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) r.push_back(json::parse(line));
  return r;
}

using Clock = std::chrono::steady_clock;

}  // namespace

TEST(SchemaRun, RefCyclesAreRefusedBeforeTheRunNamingTheFile) {
  const fs::path dir = temp_dir("cycles");
  write(dir / "a.xml", ubl_with_id("INV-1"));
  const std::pair<const char*, const char*> cases[] = {
      {R"({"$ref":"#"})", ": (root): $ref cycle that makes no progress: (root) -> (root)"},
      {R"({"definitions":{"a":{"$ref":"#/definitions/b"},"b":{"$ref":"#/definitions/a"}},"$ref":"#/definitions/a"})",
       ": /definitions/a: $ref cycle that makes no progress: /definitions/a -> /definitions/b -> /definitions/a"}};
  for (const auto& [schema, expected] : cases) {
    const fs::path s = dir / "cycle.schema.json";
    write(s, schema);
    const auto t0 = Clock::now();
    auto r = quarry::test_support::run_quarry("run " + (dir / "a.xml").string() + " --schema " + s.string() + " -o " +
                                              (dir / "out").string() + " --progress none");
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_NE(r.out.find(s.string() + expected), std::string::npos) << r.out;
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(60));  // a hang check
  }
}

TEST(SchemaRun, PatternsOverHostileInvoiceNumbersGiveRecords) {
  const fs::path dir = temp_dir("patterns");
  json schema = json::parse(read(fs::path(QUARRY_SOURCE_DIR) / "schemas/invoice.schema.json"));
  schema["properties"]["invoice_number"]["pattern"] = "^([A-Z0-9]+-?)+$";
  write(dir / "invoice+pattern.schema.json", schema.dump(2));
  fs::create_directories(dir / "in");
  write(dir / "in/forty.xml", ubl_with_id(std::string(40, 'A') + "!"));
  write(dir / "in/long.xml", ubl_with_id(std::string(100003, 'A')));
  const auto t0 = Clock::now();
  auto r = quarry::test_support::run_quarry("run " + (dir / "in").string() + " --schema " +
                                            (dir / "invoice+pattern.schema.json").string() + " -o " +
                                            (dir / "out").string() + " --progress none");
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(60));  // a hang check
  EXPECT_EQ(r.code, 2) << r.out;  // one record is invalid
  const auto recs = records(dir / "out");
  ASSERT_EQ(recs.size(), 2u) << r.out;
  for (const auto& rec : recs) {
    EXPECT_EQ(rec["method"], "einvoice-ubl");
    if (rec["source"].get<std::string>().ends_with("forty.xml")) {
      EXPECT_EQ(rec["status"], "invalid");
      ASSERT_FALSE(rec["errors"].empty());
      EXPECT_EQ(rec["errors"][0]["pointer"], "/invoice_number");
      EXPECT_EQ(rec["errors"][0]["rule"], "pattern");
    } else {
      EXPECT_EQ(rec["data"]["invoice_number"].get<std::string>().size(), 100003u);
      EXPECT_EQ(rec["status"], "ok") << rec["errors"].dump();
    }
  }
}
