// discover: inputs (files, folders walked recursively, glob patterns) -> one InputMsg per file.
// Everything in a folder that is not a folder gets a record: regular files are extracted, special
// files (FIFO, device, socket) and broken links become error records without being opened. Symbolic
// links to folders are not followed (no loops), hidden entries and OUTDIR are skipped.
#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <cerrno>
#include <cstring>
#include <set>

#include "pipeline/extract/input_file.hpp"
#include "pipeline/run/batch.hpp"
#include "pipeline/run/source_name.hpp"
#include "pipeline/run/stages.hpp"

namespace quarry::run::stages {

namespace {

namespace fs = std::filesystem;

bool has_glob_chars(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

class Discoverer {
 public:
  Discoverer(Shared& sh, zmq::socket_t& out) : sh_(sh), out_(out) {
    std::error_code ec;
    exclude_ = fs::weakly_canonical(sh.job.output, ec);
  }

  void run() {
    for (const auto& input : sh_.job.inputs) {
      if (stopped()) return;
      if (has_glob_chars(input) && !fs::exists(input)) {
        glob_t g{};
        const int rc = ::glob(input.c_str(), 0, nullptr, &g);
        if (rc == GLOB_NOMATCH) {
          sh_.log("discover: " + input + ": no file matches the pattern");
        } else if (rc == 0) {
          for (std::size_t i = 0; i < g.gl_pathc && !stopped(); ++i) visit(g.gl_pathv[i]);
        } else {
          sh_.log("discover: " + input + ": cannot expand the pattern");
        }
        globfree(&g);
      } else {
        visit(input);
      }
    }
  }

 private:
  Shared& sh_;
  zmq::socket_t& out_;
  fs::path exclude_;
  std::set<std::string> seen_;

  bool stopped() const { return sh_.stop() > 0; }

  void visit(const fs::path& p) {
    struct stat st {};
    if (::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      walk(p);
      return;
    }
    // A missing file is left to the extract stage ("no such file"); a special file is never opened.
    emit(p, ::stat(p.c_str(), &st) == 0 ? extract::special_file_reason(st.st_mode) : std::string());
  }

  bool excluded(const fs::path& p) const {
    if (exclude_.empty()) return false;
    std::error_code ec;
    const auto c = fs::weakly_canonical(p, ec);
    if (ec) return false;
    const auto rel = c.lexically_relative(exclude_);
    return !rel.empty() && *rel.begin() != "..";
  }

  void walk(const fs::path& dir) {
    if (excluded(dir)) return;
    std::vector<fs::path> entries;
    std::error_code ec;
    for (fs::directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end; !ec && it != end;
         it.increment(ec)) {
      const auto name = it->path().filename().string();
      if (!name.empty() && name[0] == '.') continue;
      entries.push_back(it->path());
    }
    if (ec) sh_.log("discover: " + dir.string() + ": " + ec.message());
    std::sort(entries.begin(), entries.end());
    for (const auto& e : entries) {
      if (stopped()) return;
      struct stat lst {}, st {};
      if (::lstat(e.c_str(), &lst) != 0) continue;  // gone since it was listed
      if (S_ISDIR(lst.st_mode)) {
        walk(e);  // real folders only: no symlink loops
      } else if (::stat(e.c_str(), &st) != 0) {
        emit(e, std::string("broken symbolic link: ") + std::strerror(errno));
      } else if (S_ISDIR(st.st_mode)) {
        sh_.log("discover: " + e.string() + ": a symbolic link to a folder, not followed");
      } else {
        // FIFOs, devices and sockets get an error record without being opened.
        emit(e, extract::special_file_reason(st.st_mode));
      }
    }
  }

  void emit(const fs::path& p, std::string problem) {
    if (excluded(p)) return;
    std::error_code ec;
    auto canon = fs::weakly_canonical(p, ec).string();
    if (ec) canon = p.string();
    if (!seen_.insert(canon).second) return;
    const auto t0 = std::chrono::steady_clock::now();
    InputMsg msg;
    msg.path = p.native();
    auto name = source_name(msg.path);
    msg.source = std::move(name.display);
    msg.source_b64 = std::move(name.base64);
    msg.problem = std::move(problem);
    sh_.discover_clock.add(seconds_since(t0));
    send(out_, msg);
    sh_.discovered.fetch_add(1);
  }
};

}  // namespace

void discover_stage(Shared& sh, zmq::socket_t& out) { Discoverer(sh, out).run(); }

void batch_discover_stage(Shared& sh, zmq::socket_t& to_build, zmq::socket_t& to_writer) {
  LedgerReader ledger(sh.job.output, sh.job.retry_errors);
  BatchScanner scan;
  for (const auto& input : sh.job.inputs) {
    if (sh.stop() > 0) return;
    scan.open(input);
    for (;;) {
      if (sh.stop() > 0) return;
      const auto t0 = std::chrono::steady_clock::now();
      auto item = scan.next();
      if (!item) break;
      Subject s;
      s.key = item->key;
      s.source = item->source;
      s.sha256 = item->sha256;
      const bool done = ledger.is_done(s.key, s.sha256);
      sh.discover_clock.add(seconds_since(t0));
      if (done) {
        send(to_writer, NoticeMsg{NoticeMsg::Kind::skipped, 1, std::nullopt});
      } else if (!item->line.problem.empty()) {
        send(to_writer, batch_error_record(s, item->line.number, item->line.custom_id, "request", item->line.problem,
                                           openai::batch_error_line(item->line.custom_id, "invalid_request",
                                                                    item->source + ": " + item->line.problem)));
      } else {
        BatchRequestMsg m;
        m.subject = std::move(s);
        m.line = item->line.number;
        m.custom_id = *item->line.custom_id;
        m.url = item->line.url;
        m.body = item->line.body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        send(to_build, m);
      }
      sh.discovered.fetch_add(1);
    }
  }
}

}  // namespace quarry::run::stages
