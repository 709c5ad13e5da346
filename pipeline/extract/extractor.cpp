#include "pipeline/extract/extractor.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string_view>
#include <thread>

#include "extractors/extract.hpp"
#include "pipeline/extract/input_file.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define QUARRY_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define QUARRY_ASAN 1
#endif
#endif

namespace quarry::extract {

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int k_worker_fd = 3;  ///< the channel's descriptor number in the worker
constexpr auto k_tick = std::chrono::milliseconds(50);

std::string mib(std::uint64_t bytes) {
  if (bytes % (1ull << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes) + " bytes";
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

std::string memory_reason(std::uint64_t memory_mb) { return "memory limit " + std::to_string(memory_mb) + " MiB"; }

// ---- frames: [u64 length][payload] ------------------------------------------------------------

bool send_all(int fd, const std::uint8_t* p, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        pollfd pfd{fd, POLLOUT, 0};
        ::poll(&pfd, 1, 1000);
        continue;
      }
      return false;
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

/// Sends one frame; `pass_fd` >= 0 travels with its first byte (SCM_RIGHTS).
bool send_frame(int sock, const std::vector<std::uint8_t>& payload, int pass_fd = -1) {
  const std::uint64_t len = payload.size();
  std::uint8_t header[8];
  std::memcpy(header, &len, 8);
  if (pass_fd >= 0) {
    iovec iov{header, sizeof header};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
    ssize_t w;
    do {
      w = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
    } while (w < 0 && errno == EINTR);
    if (w < 0) return false;
    if (w < static_cast<ssize_t>(sizeof header) &&
        !send_all(sock, header + w, sizeof header - static_cast<std::size_t>(w)))
      return false;
  } else if (!send_all(sock, header, sizeof header)) {
    return false;
  }
  return send_all(sock, payload.data(), payload.size());
}

/// Blocking read of exactly n bytes (worker side). False on EOF or error.
bool read_exact(int fd, std::uint8_t* p, std::size_t n) {
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

/// Worker side: one frame, and the descriptor that came with it (-1 if none). False on EOF.
bool recv_frame(int sock, std::vector<std::uint8_t>& payload, int& received_fd) {
  received_fd = -1;
  std::uint8_t header[8];
  iovec iov{header, sizeof header};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t r;
  do {
    r = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  } while (r < 0 && errno == EINTR);
  if (r <= 0) return false;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) std::memcpy(&received_fd, CMSG_DATA(c), sizeof(int));
  if (r < static_cast<ssize_t>(sizeof header) && !read_exact(sock, header + r, sizeof header - static_cast<std::size_t>(r)))
    return false;
  std::uint64_t len = 0;
  std::memcpy(&len, header, 8);
  if (len > (1ull << 30)) return false;
  payload.resize(len);
  return read_exact(sock, payload.data(), len);
}

// ---- the extraction itself (in the worker, or in the calling thread) ---------------------------

/// Peak virtual memory of this process (VmPeak), bytes; 0 if unknown.
[[maybe_unused]] std::uint64_t vm_peak_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmPeak:", 0) == 0) return std::stoull(line.substr(7)) * 1024;
  return 0;
}

struct LocalResult {
  Outcome outcome;         ///< without the document
  std::optional<Document> doc;  ///< ok: with the attachments' bytes
};

LocalResult extract_here(int fd, const std::string& source, const ExtractOptions& opts, std::uint64_t memory_mb) {
  LocalResult r;
  Outcome& o = r.outcome;
  const auto t0 = Clock::now();
  try {
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      o.rule = "read";
      o.reason = std::string("cannot stat: ") + std::strerror(errno);
      return r;
    }
    if (const auto special = special_file_reason(st.st_mode); !special.empty()) {
      o.rule = "read";
      o.reason = special;
      return r;
    }
    o.size = static_cast<std::uint64_t>(st.st_size);
    if (o.size > opts.max_file_bytes) {
      o.rule = "read";
      o.reason = "file is " + std::to_string(o.size) + " bytes, larger than the limit of " + std::to_string(opts.max_file_bytes);
      return r;
    }
    std::string bytes(o.size, '\0');
    std::size_t got = 0;
    while (got < bytes.size()) {
      const ssize_t n = ::pread(fd, bytes.data() + got, bytes.size() - got, static_cast<off_t>(got));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        o.rule = "read";
        o.reason = std::string("read error: ") + std::strerror(errno);
        return r;
      }
      if (n == 0) break;  // the file shrank while being read
      got += static_cast<std::size_t>(n);
    }
    bytes.resize(got);
    o.sha256 = sha256_hex(bytes);
    o.media_type = detect_media_type(bytes, source);
    auto doc = extract_bytes(bytes, source, opts);
    std::string().swap(bytes);
    if (!doc) {
      o.rule = "extract";
      o.reason = doc.error().reason;
      return r;
    }
    if (auto caps = check_caps(*doc, opts); !caps.empty()) {
      o.rule = "limit";
      o.reason = std::move(caps);
      return r;
    }
    o.status = Outcome::Status::ok;
    r.doc = std::move(*doc);
  } catch (const std::bad_alloc&) {
    r.doc.reset();
    o.status = Outcome::Status::failed;
    o.rule = "limit";
    o.reason = memory_mb ? memory_reason(memory_mb) : "out of memory";
  } catch (const std::exception& e) {
    r.doc.reset();
    o.status = Outcome::Status::failed;
    o.rule = "extract";
    o.reason = std::string("internal error: ") + e.what();
  }
  o.ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  return r;
}

ExtractedDocument without_attachment_bytes(Document doc) {
  ExtractedDocument out;
  for (auto& a : doc.attachments) {
    out.attachment_bytes.push_back(a.bytes.size());
    std::string().swap(a.bytes);
  }
  out.doc = std::move(doc);
  return out;
}

// ---- settings on the wire ----------------------------------------------------------------------

std::vector<std::uint8_t> encode_settings(const Settings& s) {
  const auto& o = s.options;
  return json::to_msgpack(json::array({o.max_file_bytes, o.max_text_bytes, o.max_page_text_bytes,
                                       o.max_attachment_bytes, o.max_xml_depth, o.max_pages,
                                       json::binary(std::vector<std::uint8_t>(o.pdf_password.begin(), o.pdf_password.end())),
                                       o.map_einvoices, o.pdf_line_bboxes, s.limits.memory_mb,
                                       o.max_attachments_total_bytes, o.max_page_content_bytes, o.max_content_bytes,
                                       o.max_font_bytes, o.max_page_words, o.max_page_layout_work, o.max_layout_work,
                                       o.max_xml_attributes, o.max_xml_nodes}));
}

void decode_settings(const std::vector<std::uint8_t>& bytes, ExtractOptions& o, std::uint64_t& memory_mb) {
  const json j = json::from_msgpack(bytes);
  o.max_file_bytes = j.at(0).get<std::uint64_t>();
  o.max_text_bytes = j.at(1).get<std::uint64_t>();
  o.max_page_text_bytes = j.at(2).get<std::uint64_t>();
  o.max_attachment_bytes = j.at(3).get<std::uint64_t>();
  o.max_xml_depth = j.at(4).get<int>();
  o.max_pages = j.at(5).get<int>();
  const auto& pw = j.at(6).get_binary();
  o.pdf_password.assign(pw.begin(), pw.end());
  o.map_einvoices = j.at(7).get<bool>();
  o.pdf_line_bboxes = j.at(8).get<bool>();
  memory_mb = j.at(9).get<std::uint64_t>();
  o.max_attachments_total_bytes = j.at(10).get<std::uint64_t>();
  o.max_page_content_bytes = j.at(11).get<std::uint64_t>();
  o.max_content_bytes = j.at(12).get<std::uint64_t>();
  o.max_font_bytes = j.at(13).get<std::uint64_t>();
  o.max_page_words = j.at(14).get<int>();
  o.max_page_layout_work = j.at(15).get<std::uint64_t>();
  o.max_layout_work = j.at(16).get<std::uint64_t>();
  o.max_xml_attributes = j.at(17).get<int>();
  o.max_xml_nodes = j.at(18).get<std::uint64_t>();
}

// Reply meta frame: [status (0 ok, 1 failed), rule, reason, sha256, media_type, size, exiting]
std::vector<std::uint8_t> encode_meta(const Outcome& o, bool exiting) {
  return json::to_msgpack(json::array({o.status == Outcome::Status::ok ? 0 : 1, o.rule,
                                       json::binary(std::vector<std::uint8_t>(o.reason.begin(), o.reason.end())),
                                       o.sha256, o.media_type, o.size, exiting}));
}

int worker_loop(int sock) {
  std::vector<std::uint8_t> frame;
  int no_fd = -1;
  if (!recv_frame(sock, frame, no_fd)) return 1;
  if (no_fd >= 0) ::close(no_fd);
  ExtractOptions opts;
  std::uint64_t memory_mb = 0;
  try {
    decode_settings(frame, opts, memory_mb);
  } catch (const std::exception&) {
    return 1;
  }
#ifndef QUARRY_ASAN
  // AddressSanitizer reserves terabytes of address space for its shadow memory: under it the
  // parent's RSS watch is the memory limit.
  if (memory_mb > 0) {
    const rlimit lim{static_cast<rlim_t>(memory_mb) << 20, static_cast<rlim_t>(memory_mb) << 20};
    if (::setrlimit(RLIMIT_AS, &lim) != 0) return 1;
  }
#endif
  if (!send_frame(sock, json::to_msgpack(json("ready")))) return 1;
  for (;;) {
    int fd = -1;
    if (!recv_frame(sock, frame, fd)) return 0;  // the parent closed the channel
    std::string source;
    try {
      const json req = json::from_msgpack(frame);
      const auto& b = req.at(0).get_binary();
      source.assign(b.begin(), b.end());
    } catch (const std::exception&) {
      if (fd >= 0) ::close(fd);
      return 1;
    }
    LocalResult r;
    if (fd < 0) {
      r.outcome.rule = "read";
      r.outcome.reason = "no file descriptor received";
    } else {
      r = extract_here(fd, source, opts, memory_mb);
      ::close(fd);
    }
    // A failure for want of memory ("out of memory": an allocation failed under RLIMIT_AS), or any
    // failure near the address-space limit, is the memory limit; the worker then exits, so that the
    // next document starts in a fresh process.
    bool exiting = false;
#ifndef QUARRY_ASAN
    if (r.outcome.status != Outcome::Status::ok && memory_mb > 0 &&
        (r.outcome.reason.find("out of memory") != std::string::npos ||
         vm_peak_bytes() >= (memory_mb << 20) / 10 * 9)) {
      r.outcome.rule = "limit";
      r.outcome.reason = memory_reason(memory_mb);
      exiting = true;
    }
#endif
    std::vector<std::uint8_t> doc_frame;
    if (r.doc) {
      try {
        doc_frame = encode_document(*r.doc);
      } catch (const std::bad_alloc&) {
        r.outcome.status = Outcome::Status::failed;
        r.outcome.rule = "limit";
        r.outcome.reason = memory_reason(memory_mb);
        exiting = true;
      }
      r.doc.reset();
    }
    // The reply's frames in one write (one wake-up of the parent).
    std::vector<std::uint8_t> reply;
    const auto append_frame = [&reply](const std::vector<std::uint8_t>& payload) {
      const std::uint64_t len = payload.size();
      const auto* h = reinterpret_cast<const std::uint8_t*>(&len);
      reply.insert(reply.end(), h, h + 8);
      reply.insert(reply.end(), payload.begin(), payload.end());
    };
    append_frame(encode_meta(r.outcome, exiting));
    if (r.outcome.status == Outcome::Status::ok) append_frame(doc_frame);
    std::vector<std::uint8_t>().swap(doc_frame);
    if (!send_all(sock, reply.data(), reply.size())) return 1;
    if (exiting) return 0;
  }
}

// ---- /proc -------------------------------------------------------------------------------------

/// VmSize and RSS of `pid` in bytes (from /proc/PID/statm); false if it cannot be read.
bool proc_memory(pid_t pid, std::uint64_t& vm, std::uint64_t& rss) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/statm", static_cast<int>(pid));
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[128] = {};
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return false;
  unsigned long long size = 0, resident = 0;
  if (std::sscanf(buf, "%llu %llu", &size, &resident) != 2) return false;
  const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  vm = size * page;
  rss = resident * page;
  return true;
}

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

}  // namespace

// ---- the parent's side of one worker ------------------------------------------------------------

struct Extractor::Worker {
  pid_t pid = -1;
  pid_t owner = 0;  ///< the thread that started it: the worker dies with it (PR_SET_PDEATHSIG)
  int sock = -1;
  std::vector<std::uint8_t> in;  ///< bytes received and not yet taken as frames
  std::uint64_t max_vm = 0;      ///< largest VmSize seen while it worked on the current document

  ~Worker() { kill(); }

  /// SIGKILL and reap; returns the wait status.
  int kill() {
    int status = 0;
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      pid = -1;
    }
    close_channel();
    return status;
  }

  /// Reaps a worker that closed its end (it is exiting); SIGKILL if it has not within 1 s.
  int reap() {
    int status = 0;
    for (int i = 0; i < 1000 && pid > 0; ++i) {
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        pid = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (pid > 0) return kill();
    close_channel();
    return status;
  }

  void close_channel() {
    if (sock >= 0) ::close(sock);
    sock = -1;
    in.clear();
  }

  /// Reads what is there without blocking; false on EOF or a read error.
  bool pump() {
    std::uint8_t buf[1 << 16];
    for (;;) {
      const ssize_t n = ::read(sock, buf, sizeof buf);
      if (n > 0) {
        in.insert(in.end(), buf, buf + n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      return false;
    }
  }

  /// Takes one complete frame from `in` if there is one; `too_large` when its announced length is over `max`.
  bool take_frame(std::vector<std::uint8_t>& out, std::uint64_t max, bool& too_large) {
    too_large = false;
    if (in.size() < 8) return false;
    std::uint64_t len = 0;
    std::memcpy(&len, in.data(), 8);
    if (len > max) {
      too_large = true;
      return false;
    }
    if (in.size() - 8 < len) return false;
    out.assign(in.begin() + 8, in.begin() + 8 + static_cast<std::ptrdiff_t>(len));
    in.erase(in.begin(), in.begin() + 8 + static_cast<std::ptrdiff_t>(len));
    return true;
  }
};

std::unique_ptr<Extractor::Worker> Extractor::spawn(const Settings& settings) {
  const std::string program = settings.worker_program.empty() ? "/proc/self/exe" : settings.worker_program;
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    throw WorkerStartError(std::string("extraction worker: socketpair: ") + std::strerror(errno));
  const int devnull = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  // Everything the child needs is prepared before fork(): after it, only async-signal-safe calls.
  // argv[0] names the real program (ps shows it), the path run may be /proc/self/exe.
  std::string arg0 = program;
  if (program == "/proc/self/exe") {
    std::error_code ec;
    const auto real = std::filesystem::read_symlink(program, ec);
    if (!ec) arg0 = real.string();
  }
  std::string path = program, arg1 = "extract-worker", arg2 = std::to_string(k_worker_fd);
  char* argv[] = {arg0.data(), arg1.data(), arg2.data(), nullptr};
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    ::close(sv[0]);
    ::close(sv[1]);
    if (devnull >= 0) ::close(devnull);
    throw WorkerStartError(std::string("extraction worker: fork: ") + std::strerror(e));
  }
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // dies with the thread that started it
    if (::getppid() != parent) ::_exit(1);
    ::setpgid(0, 0);  // a Ctrl-C at the terminal is for quarry, which stops its workers
    if (sv[1] == k_worker_fd) ::fcntl(k_worker_fd, F_SETFD, 0);
    else if (::dup2(sv[1], k_worker_fd) < 0) ::_exit(127);
    if (devnull >= 0) ::dup2(devnull, STDOUT_FILENO);  // stdout carries quarry's results, never a worker's
    ::syscall(SYS_close_range, k_worker_fd + 1, ~0U, 0);  // nothing else of the parent (the OUTDIR lock)
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    ::execv(path.c_str(), argv);
    ::_exit(127);
  }
  ::close(sv[1]);
  if (devnull >= 0) ::close(devnull);
  auto w = std::make_unique<Extractor::Worker>();
  w->pid = pid;
  w->owner = ::gettid();
  w->sock = sv[0];
  ::fcntl(w->sock, F_SETFL, ::fcntl(w->sock, F_GETFL) | O_NONBLOCK);
  const auto fail = [&](const std::string& why) -> std::unique_ptr<Extractor::Worker> {
    const int status = w->kill();
    std::string how = why;
    if (WIFEXITED(status)) how += " (exit status " + std::to_string(WEXITSTATUS(status)) + ")";
    else if (WIFSIGNALED(status)) how += " (" + signal_name(WTERMSIG(status)) + ")";
    throw WorkerStartError("cannot start the extraction worker " + program + " extract-worker: " + how);
  };
  if (!send_frame(w->sock, encode_settings(settings))) return fail("it closed the channel");
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  std::vector<std::uint8_t> frame;
  bool too_large = false;
  while (!w->take_frame(frame, 1 << 10, too_large)) {
    if (too_large) return fail("unexpected reply");
    if (Clock::now() > deadline) return fail("no answer within 30 s");
    pollfd pfd{w->sock, POLLIN, 0};
    ::poll(&pfd, 1, static_cast<int>(k_tick.count()));
    if (!w->pump()) return fail("it closed the channel");
  }
  return w;
}

Extractor::Extractor(Settings settings) : settings_(std::move(settings)) {}

Extractor::~Extractor() = default;

pid_t Extractor::worker_pid() const { return worker_ ? worker_->pid : 0; }

Outcome Extractor::extract(int fd, const std::string& source, const std::function<bool()>& cancelled) {
  if (!settings_.isolation) {
    auto r = extract_here(fd, source, settings_.options, 0);
    if (r.doc) r.outcome.extracted = without_attachment_bytes(std::move(*r.doc));
    return std::move(r.outcome);
  }
  const auto t0 = Clock::now();
  Outcome o;
  const auto finish = [&](Outcome::Status status, const std::string& rule, const std::string& reason) {
    o.status = status;
    o.rule = rule;
    o.reason = reason;
    o.ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    return std::move(o);
  };
  const json request = json::array({json::binary(std::vector<std::uint8_t>(source.begin(), source.end()))});
  const auto request_bytes = json::to_msgpack(request);
  // A worker started by another thread dies when that thread ends (PR_SET_PDEATHSIG): this thread
  // starts its own.
  if (worker_ && worker_->owner != ::gettid()) worker_.reset();
  // A worker that died between documents is noticed when the request cannot be sent: start another.
  for (int attempt = 0;; ++attempt) {
    if (!worker_) worker_ = spawn(settings_);
    if (send_frame(worker_->sock, request_bytes, fd)) break;
    worker_->kill();
    worker_.reset();
    if (attempt == 1) return finish(Outcome::Status::failed, "crash", "the extraction worker cannot be reached");
  }
  Worker& w = *worker_;
  w.max_vm = 0;
  const auto& limits = settings_.limits;
  const std::uint64_t memory_bytes = limits.memory_mb << 20;
  const auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limits.timeout_s));
  const std::uint64_t max_frame = settings_.options.max_text_bytes * 2 + (64ull << 20);
  const auto killed = [&](Outcome::Status status, const std::string& rule, const std::string& reason) {
    w.kill();
    worker_.reset();
    return finish(status, rule, reason);
  };
  std::vector<std::uint8_t> meta, doc_frame;
  bool have_meta = false, ok = false, exiting = false, closed = false;
  for (;;) {
    bool too_large = false;
    if (!have_meta && w.take_frame(meta, 1 << 20, too_large)) {
      have_meta = true;
      try {
        const json m = json::from_msgpack(meta);
        ok = m.at(0).get<int>() == 0;
        o.rule = m.at(1).get<std::string>();
        const auto& reason = m.at(2).get_binary();
        o.reason.assign(reason.begin(), reason.end());
        o.sha256 = m.at(3).get<std::string>();
        o.media_type = m.at(4).get<std::string>();
        o.size = m.at(5).get<std::uint64_t>();
        exiting = m.at(6).get<bool>();
      } catch (const std::exception&) {
        return killed(Outcome::Status::failed, "crash", "the extraction worker sent a malformed reply");
      }
      if (!ok) {
        if (exiting) {
          w.reap();
          worker_.reset();
        }
        return finish(Outcome::Status::failed, o.rule, o.reason);
      }
    }
    if (have_meta && w.take_frame(doc_frame, max_frame, too_large)) {
      try {
        o.extracted = decode_document(doc_frame.data(), doc_frame.size());
      } catch (const std::exception& e) {
        return killed(Outcome::Status::failed, "crash", std::string("the extraction worker sent ") + e.what());
      }
      if (exiting) {
        w.reap();
        worker_.reset();
      }
      return finish(Outcome::Status::ok, "", "");
    }
    if (too_large)
      return killed(Outcome::Status::failed, "limit",
                    "the extracted document is larger than " + mib(max_frame) + " (max_text_bytes x 2 + 64 MiB)");
    if (closed) {
      // The worker died before its reply was complete (what it sent was taken above).
      const std::uint64_t max_vm = w.max_vm;
      const int status = w.reap();
      worker_.reset();
      std::string reason;
      if (WIFSIGNALED(status)) {
        reason = "crashed: " + signal_name(WTERMSIG(status));
        // A signal near the address-space limit is the limit's doing (a failed allocation aborted). Not
        // under AddressSanitizer: its shadow reservation puts every worker's VmSize in the terabytes.
#ifndef QUARRY_ASAN
        if (limits.memory_mb > 0 && max_vm >= memory_bytes / 10 * 9)
          return finish(Outcome::Status::failed, "limit", memory_reason(limits.memory_mb) + " (" + reason + ")");
#else
        (void)max_vm;
#endif
      } else if (WIFEXITED(status)) {
        reason = "the extraction worker exited with status " + std::to_string(WEXITSTATUS(status));
      } else {
        reason = "the extraction worker ended";
      }
      return finish(Outcome::Status::failed, "crash", reason);
    }
    // Wait for more, watching the clock, the worker's memory and the caller. The memory is read from
    // /proc when a tick passes without data (every 50 ms while the worker works), not on every read.
    pollfd pfd{w.sock, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, static_cast<int>(k_tick.count()));
    closed = !w.pump();
    std::uint64_t vm = 0, rss = 0;
    if (ready == 0 && proc_memory(w.pid, vm, rss)) {
      w.max_vm = std::max(w.max_vm, vm);
      if (limits.memory_mb > 0 && rss > memory_bytes)
        return killed(Outcome::Status::failed, "limit", memory_reason(limits.memory_mb));
    }
    if (cancelled && cancelled()) return killed(Outcome::Status::cancelled, "", "cancelled");
    if (limits.timeout_s > 0 && Clock::now() > deadline)
      return killed(Outcome::Status::failed, "limit", "timeout after " + seconds_text(limits.timeout_s) + " s");
  }
}

// ---- helpers --------------------------------------------------------------------------------------

std::string check_caps(const Document& doc, const ExtractOptions& o) {
  if (o.max_pages > 0 && doc.pages.size() > static_cast<std::size_t>(o.max_pages))
    return std::to_string(doc.pages.size()) + " pages, more than the limit of " + std::to_string(o.max_pages);
  std::uint64_t total = 0;
  for (const auto& p : doc.pages) {
    std::uint64_t page = 0;
    for (const auto& l : p.lines) page += l.text.size() + 1;
    if (page > 0) --page;  // lines are joined by '\n'
    if (page > o.max_page_text_bytes)
      return "page " + std::to_string(p.number) + ": " + std::to_string(page) + " bytes of text, more than the limit of " +
             mib(o.max_page_text_bytes) + " per page";
    total += page + 1;
  }
  if (total > 0) --total;  // pages are joined by '\f'
  if (total > o.max_text_bytes)
    return std::to_string(total) + " bytes of text, more than the limit of " + mib(o.max_text_bytes) + " per document";
  for (const auto& a : doc.attachments)
    if (a.bytes.size() > o.max_attachment_bytes)
      return "attachment " + a.name + ": " + std::to_string(a.bytes.size()) + " bytes inflated, more than the limit of " +
             mib(o.max_attachment_bytes);
  return {};
}

std::optional<int> maybe_run_worker(int argc, char** argv) {
  if (argc < 3 || std::string_view(argv[1]) != "extract-worker") return std::nullopt;
  char* end = nullptr;
  const long fd = std::strtol(argv[2], &end, 10);
  if (!end || *end != '\0' || fd < 0) return 2;
  return worker_loop(static_cast<int>(fd));
}

}  // namespace quarry::extract
