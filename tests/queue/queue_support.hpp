// Helpers of the queue tests: a private `nats-server -js` on 127.0.0.1 (a free port, a temporary store),
// and quarry processes started with extra environment variables.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "tests/run/run_support.hpp"

namespace quarry::test_queue {

namespace fs = std::filesystem;
using namespace quarry::test_run;

/// The nats-server binary (Debian installs it in /usr/sbin), or nullopt.
inline std::optional<fs::path> find_nats_server() {
  for (const char* p : {"/usr/sbin/nats-server", "/usr/bin/nats-server", "/usr/local/bin/nats-server"})
    if (::access(p, X_OK) == 0) return fs::path(p);
  return std::nullopt;
}

/// A TCP port of 127.0.0.1 nobody listens on now (the kernel's pick).
inline int free_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  int port = -1;
  if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(s);
  return port;
}

/// Whether something accepts TCP connections on 127.0.0.1:port.
inline bool port_open(int port) {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = ::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(s);
  return ok;
}

/// Starts `argv` with stdout and stderr appended to `log` and `env` added to the environment.
inline pid_t spawn_with_env(const std::vector<std::string>& argv_s, const fs::path& log,
                            const std::vector<std::string>& env = {}) {
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e) env_s.emplace_back(*e);
  env_s.insert(env_s.end(), env.begin(), env.end());
  std::vector<char*> envp, argv;
  for (auto& s : env_s) envp.push_back(s.data());
  envp.push_back(nullptr);
  auto args = argv_s;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  if (posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data()) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

/// `quarry args...` (with --log-level info, so the logs say what happened).
inline pid_t spawn_quarry_env(const std::vector<std::string>& args, const fs::path& log,
                              const std::vector<std::string>& env = {}) {
  std::vector<std::string> argv = {std::string(QUARRY_BINARY_DIR) + "/quarry", "--log-level", "info"};
  argv.insert(argv.end(), args.begin(), args.end());
  return spawn_with_env(argv, log, env);
}

/// Waits up to `timeout` (0: only looks) for the child; its exit code (128 + signal), or nullopt if it is still running.
inline std::optional<int> wait_for(pid_t pid, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (std::chrono::steady_clock::now() >= end) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

/// The processes a test started: whatever way the test ends (a failed assertion returns early), the
/// ones still running are killed with SIGKILL and reaped.
class Children {
 public:
  pid_t add(pid_t pid) {
    pids_.push_back(pid);
    return pid;
  }
  ~Children() {
    for (const pid_t p : pids_)
      if (p > 0 && ::waitpid(p, nullptr, WNOHANG) == 0) {
        ::kill(p, SIGKILL);
        ::waitpid(p, nullptr, 0);
      }
  }

 private:
  std::vector<pid_t> pids_;
};

/// A private nats-server with JetStream on 127.0.0.1: a free port and a store in `dir`.
class NatsServer {
 public:
  NatsServer(fs::path binary, fs::path dir) : binary_(std::move(binary)), dir_(std::move(dir)), port_(free_port()) {
    fs::create_directories(dir_ / "store");
  }
  ~NatsServer() { kill(SIGKILL); }
  /// Starts the server and waits (up to 20 s) until it accepts connections.
  bool start() {
    pid_ = spawn_with_env({binary_.string(), "-js", "-a", "127.0.0.1", "-p", std::to_string(port_), "-sd",
                           (dir_ / "store").string()},
                          dir_ / "nats-server.log");
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < end) {
      if (port_open(port_)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  /// Stops it with `sig` and reaps it.
  void kill(int sig) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    if (!wait_for(pid_, std::chrono::seconds(10))) {
      ::kill(pid_, SIGKILL);
      wait_for(pid_, std::chrono::seconds(10));
    }
    pid_ = -1;
  }
  std::string url() const { return "nats://127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }

 private:
  fs::path binary_, dir_;
  int port_;
  pid_t pid_ = -1;
};

}  // namespace quarry::test_queue
