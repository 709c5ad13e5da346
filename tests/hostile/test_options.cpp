// Options checked against the machine: --extract-threads / --threads beyond what it allows are
// clamped with a warning (nothing fails with "Too many open files"), and an encrypted PDF opens with
// `quarry run --pdf-password` (made at test time with qpdf --encrypt).
#include <gtest/gtest.h>

#include "tests/common/run_command.hpp"
#include "tests/hostile/hostile_support.hpp"

namespace {

namespace fs = std::filesystem;
using namespace quarry::test_run;
using namespace quarry::test_hostile;

std::string quoted(const fs::path& p) { return "'" + p.string() + "'"; }

TEST(Options, ThreadsBeyondTheMachineAndTheOpenFileLimitAreClamped) {
  Scratch s("clamp");
  const auto inputs = make_copies(s.dir / "in", 40);
  const auto out = s.dir / "out";
  // A low open-file limit (soft and hard): 500 extract threads would need thousands of descriptors.
  const auto r = quarry::test_support::run_command(
      "ulimit -Sn 300 && ulimit -Hn 300 && " + std::string(QUARRY_BINARY_DIR) + "/quarry run " + quoted(s.dir / "in") +
      " -o " + quoted(out) + " --progress none --threads 64 --extract-threads 500 2>&1");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find("Too many open files"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("extract threads: 500 is more than this machine can use: clamped to"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("engine threads: 64 is more than"), std::string::npos) << r.out;
  expect_one_record_each(out / "results.jsonl", inputs);
}

TEST(Options, AnEncryptedPdfOpensWithPdfPassword) {
  Scratch s("encrypted");
  const fs::path plain = fs::path(QUARRY_SHARED_DIR) / "corpora" / "zugferd" / "EN16931_Einfach.pdf";
  fs::create_directories(s.dir / "in");
  const auto pdf = s.dir / "in" / "locked.pdf";
  const auto q = quarry::test_support::run_command("qpdf --encrypt user-pw owner-pw 256 -- " + quoted(plain) + " " +
                                                   quoted(pdf) + " 2>&1");
  ASSERT_EQ(q.code, 0) << q.out;

  // Without the password: an error record that names an option `quarry run` has.
  const auto out1 = s.dir / "out1";
  EXPECT_EQ(run_quarry_args(run_args({pdf}, out1), s.dir / "log1"), 2) << read_file(s.dir / "log1");
  auto recs = expect_one_record_each(out1 / "results.jsonl", {pdf});
  const std::string message = recs.at(pdf.string())["errors"][0]["message"];
  EXPECT_NE(message.find("--pdf-password"), std::string::npos) << message;
  const auto help = quarry::test_support::run_quarry("run --help");
  EXPECT_NE(help.out.find("--pdf-password"), std::string::npos);

  // With it: the embedded CII invoice is mapped.
  const auto out2 = s.dir / "out2";
  EXPECT_EQ(run_quarry_args(run_args({pdf}, out2, {"--pdf-password", "user-pw"}), s.dir / "log2"), 0)
      << read_file(s.dir / "log2");
  recs = expect_one_record_each(out2 / "results.jsonl", {pdf});
  EXPECT_EQ(recs.at(pdf.string())["status"], "ok");
  EXPECT_EQ(recs.at(pdf.string())["method"], "einvoice-cii");
}

}  // namespace
