// A `quarry serve` server for tests: the bundled model on the CPU, on a free port of 127.0.0.1 chosen
// by the system, served from a thread until the fixture goes.
#pragma once

#include <httplib.h>

#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "engine/runtime/engine.hpp"
#include "engine/tokenizer/tokenizer.hpp"
#include "pipeline/serve/server.hpp"

namespace quarry::serve::testing {

inline const std::filesystem::path kModelDir =
    std::filesystem::path(QUARRY_SOURCE_DIR) / "models" / "quarry-extract-11m";
inline const std::string kModelName = "quarry-extract-11m";

class TestServer {
 public:
  explicit TestServer(ServeOptions opt = {}, std::size_t max_num_seqs = 8, std::size_t mtp_depth = 0) {
    auto tok = engine::Tokenizer::from_dir(kModelDir);
    engine::EngineOptions eo;
    eo.n_threads = 2;
    eo.max_num_seqs = max_num_seqs;
    eo.mtp_depth = mtp_depth;
    eo.device = engine::parse_device("cpu");
    auto eng = engine::Engine::open(kModelDir, tok, eo);
    opt.host = "127.0.0.1";
    opt.port = 0;
    opt.max_num_seqs = max_num_seqs;
    server_ = std::make_unique<Server>(std::move(eng), tok, kModelName, opt);
    port_ = server_->bind();
    thread_ = std::thread([this] { server_->serve(); });
  }
  ~TestServer() {
    server_->stop();
    thread_.join();
  }
  TestServer(const TestServer&) = delete;
  TestServer& operator=(const TestServer&) = delete;

  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  /// A client of this server (generous timeouts: a CPU under load is slow).
  std::unique_ptr<httplib::Client> client() const {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", port_);
    c->set_read_timeout(120, 0);
    c->set_write_timeout(30, 0);
    c->set_connection_timeout(10, 0);
    return c;
  }
  Server& server() { return *server_; }

 private:
  std::unique_ptr<Server> server_;
  std::thread thread_;
  int port_ = -1;
};

}  // namespace quarry::serve::testing
