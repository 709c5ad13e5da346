// Ingest throughput: extracts every file of the corpora with quarry's extractors and runs
// `pdftotext -layout` (poppler-utils) over the same PDFs in the same run as the baseline.
//
// usage: bench_ingest [--corpora DIR] [--out DIR] [--repeats N]
//   One warm-up pass, then N measured passes of each variant, interleaved so that machine noise
//   hits all variants alike; reports the median pass. Pages: PDF pages as quarry counts them (the
//   same denominator for pdftotext), one page per HTML/XML/text file. pdftotext runs as one process
//   per file (that is how it is used), so its figures include process start-up.
// Writes DIR/ingest.json (machine, commit, every sample) and DIR/ingest.md (table).
#include <poppler-version.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "extractors/extract.hpp"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::vector<fs::path> list_files(const fs::path& dir) {
  std::vector<fs::path> out;
  for (auto it = fs::recursive_directory_iterator(dir); it != fs::recursive_directory_iterator(); ++it) {
    if (it->path().filename().string().front() == '.') {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file()) out.push_back(it->path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

int run_pdftotext(const fs::path& pdf) {
  std::string a0 = "pdftotext", a1 = "-layout", a2 = pdf.string(), a3 = "/dev/null";
  char* argv[] = {a0.data(), a1.data(), a2.data(), a3.data(), nullptr};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, "pdftotext", &fa, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string shell_line(const std::string& cmd) {
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[256];
    while (fgets(buf, sizeof buf, p)) out += buf;
    pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

struct Variant {
  std::string name, what;
  std::vector<double> seconds;
  double pages = 0;
};

}  // namespace

int main(int argc, char** argv) {
  fs::path corpora = QUARRY_DEFAULT_CORPORA, out_dir = "bench-out/ingest";
  int repeats = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--corpora" && i + 1 < argc) {
      corpora = argv[++i];
    } else if (a == "--out" && i + 1 < argc) {
      out_dir = argv[++i];
    } else if (a == "--repeats" && i + 1 < argc) {
      repeats = std::max(1, std::atoi(argv[++i]));
    } else {
      std::cerr << "usage: bench_ingest [--corpora DIR] [--out DIR] [--repeats N]\n";
      return 1;
    }
  }
  const auto files = list_files(corpora);
  std::vector<fs::path> pdfs;
  for (const auto& f : files)
    if (f.extension() == ".pdf") pdfs.push_back(f);
  if (files.empty()) {
    std::cerr << "no files under " << corpora << "\n";
    return 1;
  }

  quarry::ExtractOptions with_boxes, no_boxes;
  no_boxes.pdf_line_bboxes = false;
  // Page counts and outcomes, from one extraction of everything.
  double pages_all = 0, pages_pdf = 0;
  std::size_t ok = 0, failed = 0, bytes = 0;
  for (const auto& f : files) {
    bytes += fs::file_size(f);
    auto d = quarry::extract_file(f, with_boxes);
    if (!d) {
      ++failed;
      continue;
    }
    ++ok;
    pages_all += static_cast<double>(d->pages.size());
    if (d->media_type == "application/pdf") pages_pdf += static_cast<double>(d->pages.size());
  }
  if (run_pdftotext(pdfs.front()) < 0) {
    std::cerr << "pdftotext not found (Debian package poppler-utils)\n";
    return 1;
  }

  std::vector<Variant> variants = {
      {"quarry_all", "quarry, every file (as quarry ingest: line boxes off)", {}, pages_all},
      {"quarry_pdf", "quarry, PDFs (line boxes on)", {}, pages_pdf},
      {"quarry_pdf_no_boxes", "quarry, PDFs (line boxes off)", {}, pages_pdf},
      {"pdftotext_pdf", "pdftotext -layout, PDFs (process per file)", {}, pages_pdf},
  };
  auto pass = [&](std::size_t v) {
    const auto t0 = Clock::now();
    if (v == 0) {
      for (const auto& f : files) (void)quarry::extract_file(f, no_boxes);
    } else if (v == 1 || v == 2) {
      for (const auto& f : pdfs) (void)quarry::extract_file(f, v == 1 ? with_boxes : no_boxes);
    } else {
      for (const auto& f : pdfs) run_pdftotext(f);
    }
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  for (std::size_t v = 0; v < variants.size(); ++v) pass(v);  // warm-up (page cache, fonts)
  for (int r = 0; r < repeats; ++r)
    for (std::size_t v = 0; v < variants.size(); ++v) variants[v].seconds.push_back(pass(v));

  utsname u{};
  uname(&u);
  nlohmann::json j;
  j["bench"] = "ingest";
  j["machine"] = {{"host", u.nodename},
                  {"kernel", std::string(u.sysname) + " " + u.release},
                  {"cpu", shell_line("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'")},
                  {"hardware_threads", std::thread::hardware_concurrency()}};
  j["commit"] = shell_line(std::string("git -C '") + QUARRY_SOURCE_DIR + "' rev-parse --short HEAD 2>/dev/null");
  j["poppler"] = poppler::version_string();
  j["pdftotext"] = shell_line("pdftotext -v 2>&1 | head -1");
  j["threads"] = 1;
  j["repeats"] = repeats;
  j["corpus"] = {{"files", files.size()}, {"pdfs", pdfs.size()}, {"bytes", bytes}, {"ok", ok},
                 {"failed", failed}, {"pages_all", pages_all}, {"pages_pdf", pages_pdf}};
  std::string md = "| variant | median s | pages/s | ratio to pdftotext |\n| --- | ---: | ---: | ---: |\n";
  const double base = variants.back().pages / median(variants.back().seconds);
  for (const auto& v : variants) {
    const double m = median(v.seconds);
    const double pps = v.pages / m;
    j["results"][v.name] = {{"what", v.what}, {"median_s", m}, {"pages", v.pages}, {"pages_per_s", pps},
                            {"samples_s", v.seconds}};
    char row[256];
    std::snprintf(row, sizeof row, "| %s | %.3f | %.1f | %s |\n", v.what.c_str(), m, pps,
                  v.name == "quarry_all" ? "-" : (std::to_string(pps / base).substr(0, 5) + "x").c_str());
    md += row;
  }
  j["ratio_quarry_pdf_to_pdftotext"] = variants[1].pages / median(variants[1].seconds) / base;
  j["ratio_quarry_pdf_no_boxes_to_pdftotext"] = variants[2].pages / median(variants[2].seconds) / base;
  md = "Ingest throughput, " + std::to_string(files.size()) + " files (" + std::to_string(pdfs.size()) +
       " PDFs, " + std::to_string(static_cast<int>(pages_pdf)) + " PDF pages), median of " +
       std::to_string(repeats) + " passes, 1 thread, commit " + j["commit"].get<std::string>() + ".\n\n" + md;

  fs::create_directories(out_dir);
  std::ofstream(out_dir / "ingest.json") << j.dump(2) << "\n";
  std::ofstream(out_dir / "ingest.md") << md;
  std::cout << md;
  return 0;
}
