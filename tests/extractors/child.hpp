// Runs a piece of a test in a child process (fork) and reports how it ended, its wall time and its peak
// resident memory (getrusage of the child through wait4), so that a hostile input can be checked for
// a hang or a memory blow-up without taking the test process down. The bounds tests put on these are
// generous guards (a minute, 2 GiB), not speed measurements: those are in bench/ingest.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>

namespace quarry::test {

struct ChildResult {
  bool finished = false;     ///< exited normally (not killed, not timed out)
  bool timed_out = false;
  double seconds = 0;        ///< wall time
  long max_rss_kb = 0;       ///< peak resident set size of the child, KiB
  std::string output;        ///< what `work` returned
};

/// Runs `work` in a child process; kills it after `timeout_s`.
inline ChildResult in_child(const std::function<std::string()>& work, int timeout_s = 120) {
  ChildResult r;
  int fds[2];
  if (pipe(fds) != 0) return r;
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid < 0) return r;
  if (pid == 0) {
    close(fds[0]);
    std::string out;
    try {
      out = work();
    } catch (const std::exception& e) {
      out = std::string("exception: ") + e.what();
    }
    for (std::size_t done = 0; done < out.size();) {
      const ssize_t n = write(fds[1], out.data() + done, out.size() - done);
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
    _exit(0);
  }
  close(fds[1]);
  const auto deadline = t0 + std::chrono::seconds(timeout_s);
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      r.timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    r.output.append(buf, static_cast<std::size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  rusage ru{};
  wait4(pid, &status, 0, &ru);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.max_rss_kb = ru.ru_maxrss;
  r.finished = !r.timed_out && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  return r;
}

}  // namespace quarry::test
