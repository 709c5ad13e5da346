// discover: inputs (files, folders walked recursively, glob patterns) -> one InputMsg per file.
#include <glob.h>

#include <algorithm>
#include <filesystem>
#include <set>

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
    std::error_code ec;
    const auto st = fs::status(p, ec);
    if (!ec && fs::is_directory(st)) {
      walk(p);
    } else {
      emit(p);
    }
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
      std::error_code ec2;
      const auto lst = fs::symlink_status(e, ec2);
      if (fs::is_directory(lst)) walk(e);  // real folders only: no symlink loops
      else if (fs::is_regular_file(fs::status(e, ec2))) emit(e);
    }
  }

  void emit(const fs::path& p) {
    if (excluded(p)) return;
    std::error_code ec;
    auto canon = fs::weakly_canonical(p, ec).string();
    if (ec) canon = p.string();
    if (!seen_.insert(canon).second) return;
    const auto t0 = std::chrono::steady_clock::now();
    InputMsg msg;
    msg.path = p.string();
    msg.source = p.string();
    sh_.discover_clock.add(seconds_since(t0));
    send(out_, msg);
    sh_.discovered.fetch_add(1);
  }
};

}  // namespace

void discover_stage(Shared& sh, zmq::socket_t& out) { Discoverer(sh, out).run(); }

}  // namespace quarry::run::stages
