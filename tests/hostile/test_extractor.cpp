// The extraction worker processes (pipeline/extract/extractor.hpp) on their own: the same document as
// in-process extraction, and a timeout, a memory limit, a crash, a cancel and the caps each becoming
// that document's failure, with the next document extracted by a fresh worker. Small bombs and tight
// limits keep it fast; the full-size cases with the default limits are in test_bombs.cpp.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <future>
#include <thread>

#include "extractors/extract.hpp"
#include "pipeline/extract/extractor.hpp"
#include "pipeline/extract/input_file.hpp"
#include "tests/hostile/hostile_support.hpp"
#include "tests/hostile/pdf_bombs.hpp"

namespace {

namespace fs = std::filesystem;
namespace ex = quarry::extract;
using namespace quarry::test_run;
using namespace quarry::test_hostile;

const fs::path k_zugferd = fs::path(QUARRY_SHARED_DIR) / "corpora" / "zugferd" / "EN16931_Einfach.pdf";

/// Worker processes of the quarry program with these limits, and the extractors' own caps out of the
/// way (huge): what is tested here is the backstop that must hold without them.
ex::Settings isolated(double timeout_s = 30, std::uint64_t memory_mb = 1024) {
  ex::Settings s;
  s.worker_program = std::string(QUARRY_BINARY_DIR) + "/quarry";
  s.limits.timeout_s = timeout_s;
  s.limits.memory_mb = memory_mb;
  auto& o = s.options;
  o.max_text_bytes = o.max_page_text_bytes = o.max_attachment_bytes = o.max_attachments_total_bytes = 1ull << 40;
  o.max_page_content_bytes = o.max_content_bytes = o.max_font_bytes = 1ull << 40;
  o.max_page_layout_work = o.max_layout_work = o.max_xml_nodes = 1ull << 50;
  o.max_page_words = o.max_xml_attributes = 1 << 30;
  return s;
}

/// Extracts `path` with `e` (the file opened as the run opens it).
ex::Outcome extract(ex::Extractor& e, const fs::path& path, const std::function<bool()>& cancelled = {}) {
  std::string reason;
  std::uint64_t size = 0;
  const auto fd = ex::open_input(path.string(), 1ull << 30, size, reason);
  EXPECT_TRUE(fd.has_value()) << reason;
  if (!fd) return {};
  auto o = e.extract(*fd, path.string(), cancelled);
  ::close(*fd);
  return o;
}

TEST(Extractor, AWorkerGivesTheSameDocumentAsInProcessExtraction) {
  ex::Extractor isolated_extractor(isolated());
  ex::Settings in_process;
  in_process.isolation = false;
  ex::Extractor local(in_process);
  for (const auto& p : {k_zugferd, k_samples / "en-html-1.html", k_samples / "hu-xml-1.xml", k_samples / "de-pdf-1.pdf"}) {
    const auto a = extract(isolated_extractor, p);
    const auto b = extract(local, p);
    ASSERT_EQ(a.status, ex::Outcome::Status::ok) << p << ": " << a.reason;
    ASSERT_EQ(b.status, ex::Outcome::Status::ok) << p << ": " << b.reason;
    EXPECT_EQ(a.sha256, b.sha256) << p;
    EXPECT_EQ(a.extracted.doc.text(), b.extracted.doc.text()) << p;
    EXPECT_EQ(a.extracted.doc.pages.size(), b.extracted.doc.pages.size()) << p;
    EXPECT_EQ(a.extracted.doc.media_type, b.extracted.doc.media_type) << p;
    EXPECT_EQ(a.extracted.doc.metadata, b.extracted.doc.metadata) << p;
    EXPECT_EQ(a.extracted.doc.einvoice_format, b.extracted.doc.einvoice_format) << p;
    EXPECT_EQ(a.extracted.doc.einvoice.has_value(), b.extracted.doc.einvoice.has_value()) << p;
    if (a.extracted.doc.einvoice && b.extracted.doc.einvoice) {
      EXPECT_EQ(*a.extracted.doc.einvoice, *b.extracted.doc.einvoice) << p;
    }
    EXPECT_EQ(a.extracted.attachment_bytes, b.extracted.attachment_bytes) << p;
    ASSERT_EQ(a.extracted.doc.attachments.size(), b.extracted.doc.attachments.size()) << p;
    for (std::size_t i = 0; i < a.extracted.doc.attachments.size(); ++i)
      EXPECT_EQ(a.extracted.doc.attachments[i].name, b.extracted.doc.attachments[i].name) << p;
  }
  const auto z = extract(isolated_extractor, k_zugferd);
  ASSERT_FALSE(z.extracted.attachment_bytes.empty());  // the CII XML: its size travels, not its bytes
  EXPECT_GT(z.extracted.attachment_bytes[0], 1000u);
  EXPECT_TRUE(z.extracted.doc.attachments[0].bytes.empty());
  EXPECT_GT(isolated_extractor.worker_pid(), 0);
}

TEST(Extractor, ATimeoutKillsTheWorkerAndTheNextDocumentGetsAFreshOne) {
  Scratch s("timeout");
  content_stream_bomb(s.dir / "slow.pdf", 10, 256ull << 20);
  ex::Extractor e(isolated(1.0));
  const auto t0 = std::chrono::steady_clock::now();
  const auto o = extract(e, s.dir / "slow.pdf");
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(o.status, ex::Outcome::Status::failed);
  EXPECT_EQ(o.rule, "limit");
  EXPECT_EQ(o.reason, "timeout after 1 s");
  EXPECT_LT(took, 10.0);
  EXPECT_EQ(e.worker_pid(), 0);  // killed and reaped
  const auto next = extract(e, k_samples / "en-html-1.html");
  EXPECT_EQ(next.status, ex::Outcome::Status::ok) << next.reason;
}

TEST(Extractor, TheMemoryLimitStopsATextBomb) {
  Scratch s("memory");
  text_bomb(s.dir / "text.pdf", 100ull << 20);
  ex::Extractor e(isolated(60, 256));
  const auto o = extract(e, s.dir / "text.pdf");
  EXPECT_EQ(o.status, ex::Outcome::Status::failed);
  EXPECT_EQ(o.rule, "limit") << o.reason;
  EXPECT_EQ(o.reason.rfind("memory limit 256 MiB", 0), 0u) << o.reason;
  const auto next = extract(e, k_samples / "hu-xml-1.xml");
  EXPECT_EQ(next.status, ex::Outcome::Status::ok) << next.reason;
  EXPECT_TRUE(next.extracted.doc.einvoice.has_value());
}

TEST(Extractor, TheMemoryLimitStopsAnAttachmentThatLiesAboutItsSize) {
  Scratch s("attachment");
  attachment_bomb(s.dir / "attach.pdf", 512ull << 20);
  ex::Extractor e(isolated(60, 256));
  const auto o = extract(e, s.dir / "attach.pdf");
  // Either the worker passes its memory limit, or the extractor's attachment reader fails its
  // allocation first and keeps the document without that file (a warning): never more memory.
  if (o.status == ex::Outcome::Status::ok) {
    const auto& w = o.extracted.doc.warnings;
    EXPECT_TRUE(std::any_of(w.begin(), w.end(), [](const std::string& m) { return m.find("embedded file") != std::string::npos; }))
        << "no warning about the attachment; warnings: " << testing::PrintToString(w)
        << " attachments: " << o.extracted.doc.attachments.size();
    EXPECT_TRUE(o.extracted.doc.attachments.empty() ||
                o.extracted.doc.attachments.front().bytes.size() < (256ull << 20));
  } else {
    EXPECT_EQ(o.status, ex::Outcome::Status::failed);
    EXPECT_EQ(o.rule, "limit") << o.reason;
    EXPECT_EQ(o.reason.rfind("memory limit 256 MiB", 0), 0u) << o.reason;
  }
  const auto next = extract(e, k_samples / "hu-xml-1.xml");
  EXPECT_EQ(next.status, ex::Outcome::Status::ok) << next.reason;
}

TEST(Extractor, AWorkerThatCrashesIsReportedWithItsSignal) {
  Scratch s("crash");
  let_sigsegv_end_children();
  content_stream_bomb(s.dir / "slow.pdf", 10, 256ull << 20);
  ex::Extractor e(isolated(60));
  auto pending = std::async(std::launch::async, [&] { return extract(e, s.dir / "slow.pdf"); });
  // The worker is busy with the slow document: crash it from outside.
  pid_t pid = 0;
  for (int i = 0; i < 500 && pid <= 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    pid = e.worker_pid();
  }
  ASSERT_GT(pid, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ::kill(pid, SIGSEGV);
  const auto o = pending.get();
  EXPECT_EQ(o.status, ex::Outcome::Status::failed);
  EXPECT_EQ(o.rule, "crash");
  EXPECT_EQ(o.reason, "crashed: SIGSEGV");
  const auto next = extract(e, k_samples / "en-html-1.html");
  EXPECT_EQ(next.status, ex::Outcome::Status::ok) << next.reason;
  EXPECT_NE(e.worker_pid(), pid);
}

TEST(Extractor, ACancelKillsTheWorkerAtOnce) {
  Scratch s("cancel");
  content_stream_bomb(s.dir / "slow.pdf", 10, 256ull << 20);
  ex::Extractor e(isolated(60));
  const auto t0 = std::chrono::steady_clock::now();
  const auto o = extract(e, s.dir / "slow.pdf", [&] {
    return std::chrono::steady_clock::now() - t0 > std::chrono::milliseconds(300);
  });
  EXPECT_EQ(o.status, ex::Outcome::Status::cancelled);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  EXPECT_EQ(e.worker_pid(), 0);
}

TEST(Extractor, TheCapsOnPagesAndTextPerPageAreChecked) {
  for (bool isolation : {true, false}) {
    auto settings = isolated();
    settings.isolation = isolation;
    settings.options.max_page_text_bytes = 100;
    ex::Extractor e(settings);
    auto o = extract(e, k_samples / "en-txt-1.txt");
    EXPECT_EQ(o.status, ex::Outcome::Status::failed);
    EXPECT_EQ(o.rule, "limit");
    EXPECT_NE(o.reason.find("more than the limit of 100 bytes per page"), std::string::npos) << o.reason;

    settings.options.max_page_text_bytes = 1ull << 40;
    settings.options.max_pages = 1;
    ex::Extractor e2(settings);
    // A two-page PDF (the content-stream generator with a small stream).
    Scratch s("pages");
    content_stream_bomb(s.dir / "two.pdf", 2, 1000);
    o = extract(e2, s.dir / "two.pdf");
    EXPECT_EQ(o.status, ex::Outcome::Status::failed) << isolation;
    EXPECT_NE(o.reason.find("pages"), std::string::npos) << o.reason;
  }
}

TEST(Extractor, AProgramThatCannotRunIsASetupError) {
  auto settings = isolated();
  settings.worker_program = "/nonexistent/quarry";
  ex::Extractor e(settings);
  std::string reason;
  std::uint64_t size = 0;
  const auto fd = ex::open_input((k_samples / "en-txt-1.txt").string(), 1 << 20, size, reason);
  ASSERT_TRUE(fd.has_value());
  EXPECT_THROW(e.extract(*fd, "x"), ex::WorkerStartError);
  ::close(*fd);
}

TEST(InputFile, SpecialAndOversizedFilesAreRefusedWithoutBlocking) {
  Scratch s("input");
  ASSERT_EQ(::mkfifo((s.dir / "fifo").c_str(), 0644), 0);
  std::string reason;
  std::uint64_t size = 0;
  EXPECT_FALSE(ex::open_input((s.dir / "fifo").string(), 1 << 20, size, reason).has_value());
  EXPECT_EQ(reason, "not a regular file (FIFO)");
  EXPECT_FALSE(ex::open_input("/dev/null", 1 << 20, size, reason).has_value());
  EXPECT_EQ(reason, "not a regular file (character device)");
  EXPECT_FALSE(ex::open_input((s.dir / "missing").string(), 1 << 20, size, reason).has_value());
  EXPECT_EQ(reason, "no such file");
  EXPECT_FALSE(ex::open_input((k_samples / "en-txt-1.txt").string(), 10, size, reason).has_value());
  EXPECT_NE(reason.find("larger than the limit of 10"), std::string::npos) << reason;
  const auto fd = ex::open_input((k_samples / "en-txt-1.txt").string(), 1 << 20, size, reason);
  ASSERT_TRUE(fd.has_value());
  const auto sha = ex::sha256_of_fd(*fd, reason);
  ASSERT_TRUE(sha.has_value());
  EXPECT_EQ(*sha, quarry::sha256_hex(read_file(k_samples / "en-txt-1.txt")));
  ::close(*fd);
}

}  // namespace
