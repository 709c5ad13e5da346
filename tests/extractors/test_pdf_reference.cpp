// PDF text against the reference renderer of the same engine: `pdftotext -layout` (poppler-utils)
// over every PDF of the corpora. Lines must be equal, up to trailing whitespace and blank lines
// (which the Document stores as block boundaries instead of empty lines).
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <unistd.h>

#include "tests/common/run_command.hpp"
#include "extractors/extract.hpp"
#include "tests/extractors/corpus.hpp"

namespace {

std::vector<std::string> nonblank_lines(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find_first_of("\n\f", start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.pop_back();
    if (!line.empty()) out.push_back(line);
    start = end + 1;
  }
  return out;
}

std::string pdftotext(const std::filesystem::path& pdf) { return quarry::test_support::pdftotext_layout(pdf).out; }

TEST(PdfReference, TextEqualsPdftotextLayout) {
  if (std::system("pdftotext -v >/dev/null 2>&1") != 0) GTEST_SKIP() << "pdftotext (poppler-utils) not installed";
  std::vector<std::filesystem::path> pdfs;
  for (const char* lang : {"hu", "en", "de"})
    for (const auto& f : quarry::test::files_in(quarry::test::corpora() / "nav" / "pdf" / lang)) pdfs.push_back(f);
  for (const auto& f : quarry::test::files_in(quarry::test::corpora() / "zugferd")) pdfs.push_back(f);
  ASSERT_EQ(pdfs.size(), 42u);
  quarry::ExtractOptions opts;
  opts.pdf_line_bboxes = false;
  for (const auto& pdf : pdfs) {
    SCOPED_TRACE(pdf.string());
    auto doc = quarry::extract_file(pdf, opts);
    ASSERT_TRUE(doc) << doc.error().reason;
    const auto ours = nonblank_lines(doc->text());
    const auto ref = nonblank_lines(pdftotext(pdf));
    ASSERT_FALSE(ref.empty());
    EXPECT_EQ(ours, ref);
  }
}

}  // namespace

namespace {

// Encrypted PDFs, made here by qpdf (AES-256, user and owner passwords) from a corpus PDF.
TEST(PdfEncrypted, ClearErrorWithoutPasswordTextWithIt) {
  if (std::system("qpdf --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "qpdf not installed";
  const auto src = quarry::test::corpora() / "nav" / "pdf" / "en" / "Belfoldi elolegszamla.pdf";
  const auto enc = std::filesystem::temp_directory_path() / ("quarry-enc-" + std::to_string(::getpid()) + ".pdf");
  const std::string cmd = "qpdf --encrypt user-pw owner-pw 256 -- '" + src.string() + "' '" + enc.string() + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  auto locked = quarry::extract_file(enc);
  ASSERT_FALSE(locked);
  EXPECT_EQ(locked.error().reason, "PDF is encrypted; pass --pdf-password");
  quarry::ExtractOptions opts;
  opts.pdf_password = "not-it";
  auto wrong = quarry::extract_file(enc, opts);
  ASSERT_FALSE(wrong);
  EXPECT_NE(wrong.error().reason.find("password given does not open it"), std::string::npos);
  auto plain = quarry::extract_file(src);
  ASSERT_TRUE(plain);
  for (const char* pw : {"user-pw", "owner-pw"}) {
    opts.pdf_password = pw;
    auto open = quarry::extract_file(enc, opts);
    ASSERT_TRUE(open) << open.error().reason;
    EXPECT_EQ(open->text(), plain->text());
    EXPECT_EQ(open->metadata.at("encrypted"), "true");
  }
  std::filesystem::remove(enc);
}

}  // namespace
