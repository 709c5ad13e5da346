// The PDF bombs of the hardening issue, full size, through `quarry run` with its default limits, each
// alone in an input folder: 10 pages sharing a 1 GiB content stream, a 0.5 MB PDF whose page shows
// 400 MB of text, a PDF embedding a file that inflates to 1 GiB. Each gets its record within 60 s,
// the process tree stays under 2 GiB of RSS, nothing crashes. And an extraction worker that crashes
// mid-document costs that document only.
//
// (About 35 s: the content-stream bomb runs into the 30 s timeout, the others run meanwhile.)
#include <dirent.h>
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <iterator>
#include <set>
#include <sstream>
#include <vector>

#include "tests/hostile/hostile_support.hpp"
#include "tests/hostile/pdf_bombs.hpp"

namespace {

namespace fs = std::filesystem;
using namespace quarry::test_run;
using namespace quarry::test_hostile;

/// The fields of /proc/<pid>/stat from field 3 (the state) on: they start after the command name's last
/// ')' (the name may hold spaces and parentheses). Empty if the process is gone.
std::vector<std::string> stat_fields(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string s;
  std::getline(stat, s);
  const auto close = s.rfind(')');
  if (close == std::string::npos || close + 2 > s.size()) return {};
  std::istringstream rest(s.substr(close + 2));
  return {std::istream_iterator<std::string>(rest), {}};
}

/// Parent pid and RSS (KiB) of every process, from /proc.
std::map<pid_t, std::pair<pid_t, std::uint64_t>> processes() {
  std::map<pid_t, std::pair<pid_t, std::uint64_t>> out;
  DIR* d = ::opendir("/proc");
  if (!d) return out;
  while (const dirent* e = ::readdir(d)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    const auto f = stat_fields(pid);
    if (f.size() < 2) continue;
    const long ppid = std::atol(f[1].c_str());  // field 4
    std::ifstream statm("/proc/" + std::string(e->d_name) + "/statm");
    std::uint64_t size = 0, resident = 0;
    statm >> size >> resident;
    out[pid] = {static_cast<pid_t>(ppid), resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE)) / 1024};
  }
  ::closedir(d);
  return out;
}

/// CPU time (user + system) process `pid` has used, seconds; 0 if it is gone.
double cpu_seconds(pid_t pid) {
  const auto f = stat_fields(pid);
  if (f.size() < 13) return 0.0;
  const auto utime = std::stoull(f[11]), stime = std::stoull(f[12]);  // fields 14 and 15, clock ticks
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

/// RSS of `root` and all its descendants, KiB.
std::uint64_t tree_rss_kib(pid_t root, std::set<pid_t>* members = nullptr) {
  const auto all = processes();
  std::set<pid_t> tree = {root};
  for (bool grew = true; grew;) {
    grew = false;
    for (const auto& [pid, info] : all)
      if (tree.count(info.first) && tree.insert(pid).second) grew = true;
  }
  std::uint64_t sum = 0;
  for (pid_t p : tree)
    if (all.count(p)) sum += all.at(p).second;
  if (members) *members = tree;
  return sum;
}

struct RunResult {
  int rc = -1;
  double seconds = 0;
  std::uint64_t peak_tree_rss_kib = 0;  ///< sampled every 20 ms
  long peak_rss_kib = 0;                ///< wait4: the largest of quarry and its workers
  json record;
  std::size_t records = 0;
};

/// `quarry run` on a folder holding `pdf` alone, default limits; samples the process tree's RSS.
RunResult run_alone(const fs::path& pdf, const fs::path& work, const std::string& name) {
  const auto in = work / ("in-" + name);
  fs::create_directories(in);
  fs::rename(pdf, in / pdf.filename());
  const auto out = work / ("out-" + name);
  RunResult r;
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = spawn_quarry({"run", in.string(), "-o", out.string(), "--progress", "none", "--threads", "2"},
                                 work / ("log-" + name));
  EXPECT_GT(pid, 0);
  while (!exited(pid) && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(90)) {
    r.peak_tree_rss_kib = std::max(r.peak_tree_rss_kib, tree_rss_kib(pid));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!exited(pid)) ::kill(pid, SIGKILL);
  r.rc = wait_child(pid, &r.peak_rss_kib);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto recs = read_records(out / "results.jsonl");
  r.records = recs.size();
  if (!recs.empty()) r.record = recs.front();
  return r;
}

void expect_bounded(const RunResult& r, const std::string& what) {
  constexpr std::uint64_t two_gib_kib = 2ull << 20;
  EXPECT_TRUE(r.rc == 0 || r.rc == 2) << what << ": quarry ended with " << r.rc;
  EXPECT_EQ(r.records, 1u) << what;
  EXPECT_LT(r.seconds, 60.0) << what;
  EXPECT_LT(r.peak_tree_rss_kib, two_gib_kib) << what << ": process tree RSS";
  EXPECT_LT(static_cast<std::uint64_t>(r.peak_rss_kib), two_gib_kib) << what;
  std::printf("[ bomb     ] %s: %.1f s, process tree RSS peak %.0f MiB, record %s\n", what.c_str(), r.seconds,
              static_cast<double>(r.peak_tree_rss_kib) / 1024, r.record.dump().substr(0, 300).c_str());
}

TEST(Bombs, EachAloneGetsItsRecordWithinAMinuteInBoundedMemoryWithTheDefaultLimits) {
  Scratch s("bombs");
  // The slow one first, in the background: it runs into the 30 s timeout.
  content_stream_bomb(s.dir / "pages.pdf", 10, 1ull << 30);
  auto content = std::async(std::launch::async, [&] { return run_alone(s.dir / "pages.pdf", s.dir, "content"); });

  text_bomb(s.dir / "text.pdf", 400ull << 20);
  EXPECT_LT(fs::file_size(s.dir / "text.pdf"), 600u << 10);
  const auto text = run_alone(s.dir / "text.pdf", s.dir, "text");
  expect_bounded(text, "400 MB of text on one page");
  EXPECT_EQ(text.record.value("status", ""), "error") << text.record.dump();

  attachment_bomb(s.dir / "attachment.pdf", 1ull << 30);
  const auto attachment = run_alone(s.dir / "attachment.pdf", s.dir, "attachment");
  expect_bounded(attachment, "an attachment inflating to 1 GiB");

  const auto pages = content.get();
  expect_bounded(pages, "10 pages sharing a 1 GiB content stream");
}

TEST(Bombs, AWorkerThatCrashesCostsOneDocumentAndTheBatchGoesOn) {
  Scratch s("crashrun");
  let_sigsegv_end_children();
  const auto in = s.dir / "in";
  fs::create_directories(in);
  content_stream_bomb(in / "a-slow.pdf", 10, 256ull << 20);
  for (const char* n : {"en-xml-1.xml", "de-xml-1.xml"}) fs::copy_file(k_samples / n, in / n);
  const auto out = s.dir / "out";
  const pid_t pid = spawn_quarry(run_args({in}, out, {"--extract-threads", "1", "--max-content-mb", "1048576", "--max-page-content-mb", "1048576"}), s.dir / "log");
  ASSERT_GT(pid, 0);
  // Find the extraction worker (a child of quarry running "extract-worker") and crash it.
  pid_t worker = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (worker == 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30) && !exited(pid)) {
    std::set<pid_t> tree;
    tree_rss_kib(pid, &tree);
    for (pid_t p : tree) {
      if (p == pid) continue;
      if (read_file("/proc/" + std::to_string(p) + "/cmdline").find("extract-worker") != std::string::npos) worker = p;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_GT(worker, 0) << read_file(s.dir / "log");
  // Busy with the slow document: a second of CPU is past the worker's start-up handshake (a fixed 300 ms
  // once hit a worker under AddressSanitizer still starting, and the run stopped: no worker could start).
  const auto t1 = std::chrono::steady_clock::now();
  while (cpu_seconds(worker) < 1.0 && !exited(pid) && std::chrono::steady_clock::now() - t1 < std::chrono::seconds(30))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_GE(cpu_seconds(worker), 1.0) << read_file(s.dir / "log");
  ::kill(worker, SIGSEGV);
  const int rc = wait_child_for(pid, std::chrono::seconds(60));
  EXPECT_EQ(rc, 2) << read_file(s.dir / "log");
  const auto recs = expect_one_record_each(out / "results.jsonl", {in / "a-slow.pdf", in / "en-xml-1.xml", in / "de-xml-1.xml"});
  const auto& crashed = recs.at((in / "a-slow.pdf").string());
  EXPECT_EQ(crashed["status"], "error");
  EXPECT_EQ(crashed["errors"][0]["rule"], "crash");
  EXPECT_EQ(crashed["errors"][0]["message"], "crashed: SIGSEGV");
  EXPECT_EQ(recs.at((in / "en-xml-1.xml").string())["status"], "ok");
  EXPECT_EQ(recs.at((in / "de-xml-1.xml").string())["status"], "ok");
}

}  // namespace
