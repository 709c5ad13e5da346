// Broken and hostile inputs: each gives an error record (or, where the input is still readable, an
// ok one) within seconds; never a crash, a hang, a network access or a file disclosure.
// The time bound below is a hang guard, far above the expected milliseconds, not a speed test.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <fstream>
#include <random>

#include "extractors/extract.hpp"
#include "tests/extractors/corpus.hpp"

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kHangGuard = std::chrono::seconds(20);

std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

quarry::Expected<quarry::Document> timed(std::string_view bytes, const std::string& name) {
  const auto t0 = Clock::now();
  auto r = quarry::extract_bytes(bytes, name);
  EXPECT_LT(Clock::now() - t0, kHangGuard) << name;
  if (!r) {
    EXPECT_EQ(r.error().file, name);
    EXPECT_FALSE(r.error().reason.empty());
  }
  return r;
}

TEST(Hostile, EveryMalformedCorpusFileIsAnError) {
  std::size_t n = 0;
  for (const auto& f : quarry::test::files_in(quarry::test::corpora() / "malformed")) {
    const auto t0 = Clock::now();
    auto r = quarry::extract_file(f);
    EXPECT_LT(Clock::now() - t0, kHangGuard) << f;
    EXPECT_FALSE(r) << f << " was accepted";
    if (!r) {
      EXPECT_EQ(r.error().file, f.string());
    }
    ++n;
  }
  EXPECT_EQ(n, 4u);
}

TEST(Hostile, ExternalEntityIsRefusedAndNothingIsRead) {
  const std::string xxe =
      "<?xml version=\"1.0\"?>\n<!DOCTYPE r [<!ENTITY x SYSTEM \"file:///etc/passwd\">]>\n<r>&x;</r>\n";
  auto r = timed(xxe, "xxe.xml");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().reason.find("entit"), std::string::npos) << r.error().reason;
  // Parameter entity + external DTD by URL: same refusal, and no network.
  const std::string remote =
      "<?xml version=\"1.0\"?><!DOCTYPE r SYSTEM \"http://127.0.0.1:9/x.dtd\"><r>&ent;</r>";
  auto r2 = timed(remote, "remote.xml");
  if (r2) {
    EXPECT_EQ(r2->text().find("root:"), std::string::npos);
  }
}

TEST(Hostile, BillionLaughsIsRefused) {
  std::string x = "<?xml version=\"1.0\"?>\n<!DOCTYPE lolz [\n<!ENTITY lol \"lol\">\n";
  for (int i = 1; i <= 9; ++i) {
    x += "<!ENTITY lol" + std::to_string(i) + " \"";
    for (int k = 0; k < 10; ++k) x += "&lol" + (i == 1 ? std::string() : std::to_string(i - 1)) + ";";
    x += "\">\n";
  }
  x += "]>\n<lolz>&lol9;</lolz>\n";
  auto r = timed(x, "laughs.xml");
  EXPECT_FALSE(r);
}

TEST(Hostile, TruncatedPdfDoesNotCrash) {
  const std::string pdf = read_all(quarry::test::corpora() / "nav" / "pdf" / "hu" / "Gyujtoszamla 1.pdf");
  ASSERT_GT(pdf.size(), 1000u);
  for (std::size_t keep : {pdf.size() / 2, pdf.size() / 10, std::size_t{200}, std::size_t{8}}) {
    auto r = timed(std::string_view(pdf).substr(0, keep), "truncated.pdf");
    if (r) {
      EXPECT_FALSE(r->text().empty());  // whatever poppler recovered is real text
    }
  }
  // Header only.
  EXPECT_FALSE(timed("%PDF-1.7\n", "header.pdf"));
}

TEST(Hostile, EmptyInputIsAnError) {
  auto r = timed("", "empty.pdf");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, "empty file");
}

TEST(Hostile, RandomBytesAreErrorsOrText) {
  std::mt19937 rng(1234);
  for (int round = 0; round < 20; ++round) {
    std::string b(4096 + round * 997, '\0');
    for (char& c : b) c = static_cast<char>(rng());
    auto r = timed(b, "random.bin");
    EXPECT_FALSE(r) << "random bytes accepted as " << r->media_type;
    // The same noise behind a PDF header.
    timed("%PDF-1.4\n" + b, "random.pdf");
  }
}

TEST(Hostile, DeepXmlNestingIsRefused) {
  for (const char* prolog : {"<?xml version=\"1.0\"?>", ""}) {
    std::string x = prolog;
    for (int i = 0; i < 10000; ++i) x += "<node>";
    x += "deep";
    for (int i = 0; i < 10000; ++i) x += "</node>";
    auto r = timed(x, "deep.xml");
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().reason.find("nesting"), std::string::npos) << r.error().reason;
  }
}

TEST(Hostile, DeepHtmlNestingIsRefused) {
  std::string h = "<!DOCTYPE html><html><body>";
  for (int i = 0; i < 10000; ++i) h += "<div>";
  h += "deep";
  for (int i = 0; i < 10000; ++i) h += "</div>";
  h += "</body></html>";
  auto r = timed(h, "deep.html");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().reason.find("nesting"), std::string::npos) << r.error().reason;
  // Unclosed inline elements nest as deep as the input is long.
  std::string u = "<html><body>";
  for (int i = 0; i < 10000; ++i) u += "<span><b>";
  u += "x";
  auto ru = timed(u, "unclosed.html");
  ASSERT_FALSE(ru);
  EXPECT_NE(ru.error().reason.find("nesting"), std::string::npos) << ru.error().reason;
  // At the limit's edge (200 deep, within 256) the text is kept.
  std::string ok = "<html><body>";
  for (int i = 0; i < 200; ++i) ok += "<div>";
  ok += "kept";
  auto rk = timed(ok, "fine.html");
  ASSERT_TRUE(rk) << rk.error().reason;
  EXPECT_EQ(rk->text(), "kept");
}

TEST(Hostile, HugeTextIsRefusedBySizeLimit) {
  // 200 MB of text: over max_text_bytes (64 MiB), refused from the size alone before it is decoded.
  const auto path = std::filesystem::temp_directory_path() /
                    ("quarry-huge-" + std::to_string(::getpid()) + ".txt");
  {
    std::ofstream out(path, std::ios::binary);
    const std::string line(1023, 'a');
    for (int i = 0; i < 200 * 1000; ++i) out << line << '\n';
  }
  ASSERT_EQ(std::filesystem::file_size(path), 200u * 1000 * 1024);
  const auto t0 = Clock::now();
  auto r = quarry::extract_file(path);
  EXPECT_LT(Clock::now() - t0, kHangGuard);
  std::filesystem::remove(path);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().reason.find("limit"), std::string::npos) << r.error().reason;
  // With a file limit below the size, the file is not even read.
  quarry::ExtractOptions small;
  small.max_file_bytes = 1 << 20;
  EXPECT_FALSE(quarry::extract_bytes(std::string(2 << 20, 'a'), "big.txt", small));
}

TEST(Hostile, NotARegularFile) {
  auto r = quarry::extract_file(quarry::test::corpora());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().reason, "is a directory");
  auto m = quarry::extract_file(quarry::test::corpora() / "no-such-file.pdf");
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error().reason, "no such file");
}

}  // namespace
