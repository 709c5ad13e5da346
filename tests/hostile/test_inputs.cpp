// Hostile input listings: special files (FIFO, device, socket, broken link) in an input folder get an
// error record without being opened (no hang), and a file name that is not UTF-8 is one record
// after a run, a rerun and a recovery of the ledger.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <map>
#include <sstream>

#include "pipeline/run/source_name.hpp"
#include "tests/common/run_command.hpp"
#include "tests/hostile/pdf_bombs.hpp"
#include "tests/run/run_support.hpp"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace quarry::test_run;

const fs::path k_samples = fs::path(QUARRY_SOURCE_DIR) / "samples" / "invoices";

std::vector<std::string> run_args(const std::vector<fs::path>& in, const fs::path& out) {
  std::vector<std::string> a = {"run"};
  for (const auto& p : in) a.push_back(p.string());
  a.insert(a.end(), {"-o", out.string(), "--progress", "none", "--threads", "2", "--retries", "0"});
  return a;
}

std::map<std::string, json> by_source(const fs::path& results) {
  std::map<std::string, json> m;
  for (const auto& r : read_records(results)) {
    EXPECT_TRUE(m.emplace(r["source"].get<std::string>(), r).second) << "duplicate record " << r.dump();
  }
  return m;
}

TEST(HostileInputs, SpecialFilesGetAnErrorRecordWithoutBeingOpened) {
  Scratch s("special");
  const auto in = s.dir / "in";
  fs::create_directories(in);
  fs::copy_file(k_samples / "en-xml-1.xml", in / "a.xml");
  ASSERT_EQ(::mkfifo((in / "b.fifo").c_str(), 0644), 0);
  fs::create_symlink("/dev/zero", in / "c-device");  // a character device that never ends
  fs::create_symlink(in / "no-such-target", in / "d-broken");
  const int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const auto sock_path = in / "e.sock";
  ASSERT_LT(sock_path.string().size(), sizeof addr.sun_path);
  std::strcpy(addr.sun_path, sock_path.c_str());
  ASSERT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const auto explicit_fifo = s.dir / "named.fifo";  // given on the command line
  ASSERT_EQ(::mkfifo(explicit_fifo.c_str(), 0644), 0);

  const auto out = s.dir / "out";
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = run_quarry_args(run_args({in, explicit_fifo}, out), s.dir / "log");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 60.0);
  EXPECT_EQ(rc, 2) << read_file(s.dir / "log");
  auto recs = by_source(out / "results.jsonl");
  ASSERT_EQ(recs.size(), 6u) << read_file(s.dir / "log");
  EXPECT_EQ(recs.at((in / "a.xml").string())["status"], "ok");
  const auto message = [&](const fs::path& p) { return recs.at(p.string())["errors"][0]["message"].get<std::string>(); };
  for (const auto& p : {in / "b.fifo", explicit_fifo}) {
    EXPECT_EQ(recs.at(p.string())["status"], "error");
    EXPECT_EQ(message(p), "not a regular file (FIFO)");
  }
  EXPECT_EQ(message(in / "c-device"), "not a regular file (character device)");
  EXPECT_EQ(message(in / "e.sock"), "not a regular file (socket)");
  EXPECT_NE(message(in / "d-broken").find("broken symbolic link"), std::string::npos) << message(in / "d-broken");
  for (const auto& [src, r] : recs) {
    if (r["status"] == "error") {
      EXPECT_EQ(r["errors"][0]["rule"], "read") << src;
      EXPECT_TRUE(r["method"].is_null()) << src;
    }
  }
  // A rerun has nothing left to do.
  const auto before = read_file(out / "results.jsonl");
  EXPECT_EQ(run_quarry_args(run_args({in, explicit_fifo}, out), s.dir / "log2"), 2);
  EXPECT_EQ(read_file(out / "results.jsonl"), before);
  ::close(sock);
}

TEST(HostileInputs, ANameThatIsNotUtf8IsOneRecordThroughRerunsAndRecoveries) {
  Scratch s("latin1");
  const auto in = s.dir / "in";
  fs::create_directories(in);
  const std::string latin1 = std::string("factur") + '\xe9' + "-\\-1.xml";  // "facturé-\-1.xml" in Latin-1
  const fs::path raw = in / latin1;
  fs::copy_file(k_samples / "en-xml-1.xml", raw);
  fs::copy_file(k_samples / "en-xml-2.xml", in / "plain.xml");
  const auto out = s.dir / "out";
  EXPECT_EQ(run_quarry_args(run_args({in}, out), s.dir / "log"), 0) << read_file(s.dir / "log");

  const auto expected = quarry::run::source_name(raw.native());
  EXPECT_FALSE(expected.base64.empty());
  EXPECT_NE(expected.display.find("factur\\xe9-\\\\-1.xml"), std::string::npos) << expected.display;
  auto recs = by_source(out / "results.jsonl");
  ASSERT_EQ(recs.size(), 2u);
  ASSERT_TRUE(recs.count(expected.display)) << read_file(out / "results.jsonl");
  const auto& r = recs.at(expected.display);
  EXPECT_EQ(r["status"], "ok");
  EXPECT_EQ(r["source_base64"], expected.base64);
  EXPECT_EQ(r["source_base64"], quarry::run::base64(raw.native()));
  EXPECT_FALSE(recs.at((in / "plain.xml").string()).contains("source_base64"));

  // Rerun: skipped. Then the ledger is lost and rebuilt from results.jsonl: still one record each.
  EXPECT_EQ(run_quarry_args(run_args({in}, out), s.dir / "log2"), 0);
  EXPECT_EQ(count_lines(out / "results.jsonl"), 2u);
  for (const char* f : {"ledger.sqlite", "ledger.sqlite-wal", "ledger.sqlite-shm"}) fs::remove(out / f);
  EXPECT_EQ(run_quarry_args(run_args({in}, out), s.dir / "log3"), 0) << read_file(s.dir / "log3");
  EXPECT_EQ(count_lines(out / "results.jsonl"), 2u) << read_file(out / "results.jsonl");
  const auto report = json::parse(read_file(out / "report.json"));
  EXPECT_EQ(report["this_run"]["skipped_already_done"], 2);
  EXPECT_EQ(report["this_run"]["recovery"]["recovered_lines"], 2);
}

TEST(HostileInputs, IngestAppliesTheSameLimitsToSpecialFilesNamesAndBombs) {
  Scratch s("ingest");
  const auto in = s.dir / "in";
  fs::create_directories(in);
  fs::copy_file(k_samples / "en-xml-1.xml", in / "a.xml");
  ASSERT_EQ(::mkfifo((in / "b.fifo").c_str(), 0644), 0);
  const fs::path latin1 = in / (std::string("c-") + '\xe9' + ".xml");
  fs::copy_file(k_samples / "hu-xml-1.xml", latin1);
  quarry::test_hostile::text_bomb(in / "d-text-bomb.pdf", 100ull << 20);
  const auto t0 = std::chrono::steady_clock::now();
  // A generous time limit: on a loaded machine the bomb must still end at the memory limit, not the clock.
  const auto r = quarry::test_support::run_quarry("ingest -j 2 --extract-timeout 120 --extract-memory-mb 256 --max-text-mb 1048576 --max-page-text-mb 1048576 "
                                               "--max-content-mb 1048576 --max-page-content-mb 1048576 '" + in.string() + "'", false);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 150.0);
  EXPECT_EQ(r.code, 2);
  std::vector<json> recs;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) recs.push_back(json::parse(line));
  ASSERT_EQ(recs.size(), 4u) << r.out.substr(0, 2000);
  EXPECT_EQ(recs[0]["status"], "ok");
  EXPECT_EQ(recs[1]["error"], "not a regular file (FIFO)");
  EXPECT_EQ(recs[2]["source"], quarry::run::source_name(latin1.native()).display);
  EXPECT_EQ(recs[2]["source_base64"], quarry::run::base64(latin1.native()));
  EXPECT_EQ(recs[2]["status"], "ok");
  EXPECT_EQ(recs[3]["status"], "error");
  EXPECT_EQ(recs[3]["error"].get<std::string>().rfind("memory limit 256 MiB", 0), 0u) << recs[3].dump();
}

TEST(SourceName, Utf8NamesStayAsTheyAreOthersAreEscapedWithTheirBytes) {
  using quarry::run::is_utf8;
  using quarry::run::source_name;
  EXPECT_TRUE(is_utf8("plain/számla €.pdf"));
  EXPECT_FALSE(is_utf8("\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(is_utf8("\xed\xa0\x80"));      // a surrogate
  EXPECT_FALSE(is_utf8("\xf4\x90\x80\x80"));  // beyond U+10FFFF
  EXPECT_FALSE(is_utf8("\xe2\x82"));          // cut short
  EXPECT_EQ(source_name("a\\b/számla.pdf").display, "a\\b/számla.pdf");
  EXPECT_TRUE(source_name("a\\b/számla.pdf").base64.empty());
  const auto n = source_name("a\\b/\xe9t\xc3\xa9.pdf");
  EXPECT_EQ(n.display, "a\\\\b/\\xe9t\xc3\xa9.pdf");
  EXPECT_EQ(n.base64, "YVxiL+l0w6kucGRm");
}

}  // namespace
