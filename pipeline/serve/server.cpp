#include "pipeline/serve/server.hpp"

#include <httplib.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "pipeline/openai/openai_api.hpp"
#include "pipeline/serve/metrics.hpp"
#include "pipeline/serve/sse.hpp"

namespace quarry::serve {

namespace {

namespace eng = quarry::engine;
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;
using openai::ApiError;

/// JSON nesting levels a request body may have (the schema checks' limit, schemas/schema_check.hpp).
constexpr std::size_t kMaxBodyDepth = 512;

double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// ---------------------------------------------------------------- the connection's socket

/// The socket of the connection this thread serves (set by HttpServer::process_and_close_socket), so
/// that a handler waiting for the engine can tell whether its client is still there.
thread_local int tl_socket = -1;

/// Whether the peer of `fd` closed its end (FIN or an error), without consuming any byte.
bool peer_closed(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  const int n = ::poll(&p, 1, 0);
  if (n <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
  if (p.revents & POLLIN) {
    char c;
    const ssize_t r = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }
  return false;
}

/// A blocking socket as an httplib::Stream (reads buffered, both directions with timeouts).
class SocketStream final : public httplib::Stream {
 public:
  SocketStream(int fd, time_t read_s, time_t write_s)
      : fd_(fd), read_ms_(static_cast<int>(read_s * 1000)), write_ms_(static_cast<int>(write_s * 1000)) {}

  bool is_readable() const override { return wait(POLLIN, read_ms_); }
  bool is_writable() const override { return wait(POLLOUT, write_ms_); }

  ssize_t read(char* ptr, size_t size) override {
    if (off_ < len_) {
      const size_t n = std::min(size, len_ - off_);
      std::memcpy(ptr, buf_ + off_, n);
      off_ += n;
      return static_cast<ssize_t>(n);
    }
    if (!is_readable()) return -1;
    off_ = len_ = 0;
    if (size >= sizeof buf_) return recv_some(ptr, size);
    const ssize_t r = recv_some(buf_, sizeof buf_);
    if (r <= 0) return r;
    len_ = static_cast<size_t>(r);
    const size_t n = std::min(size, len_);
    std::memcpy(ptr, buf_, n);
    off_ = n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    for (;;) {
      const ssize_t r = ::send(fd_, ptr, size, MSG_NOSIGNAL);
      if (r < 0 && errno == EINTR) continue;
      return r;
    }
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { name_of(true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { name_of(false, ip, port); }
  socket_t socket() const override { return fd_; }
  using httplib::Stream::write;

 private:
  bool wait(short events, int timeout_ms) const {
    pollfd p{fd_, events, 0};
    for (;;) {
      const int n = ::poll(&p, 1, timeout_ms);
      if (n < 0 && errno == EINTR) continue;
      return n > 0 && !(p.revents & POLLNVAL) && (events != POLLOUT || !(p.revents & (POLLERR | POLLHUP)));
    }
  }
  ssize_t recv_some(char* p, size_t n) {
    for (;;) {
      const ssize_t r = ::recv(fd_, p, n, 0);
      if (r < 0 && errno == EINTR) continue;
      return r;
    }
  }
  void name_of(bool peer, std::string& ip, int& port) const {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    const int rc = peer ? ::getpeername(fd_, reinterpret_cast<sockaddr*>(&addr), &len)
                        : ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    if (rc != 0) return;
    char host[NI_MAXHOST], serv[NI_MAXSERV];
    if (::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof host, serv, sizeof serv,
                      NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
      ip = host;
      port = std::atoi(serv);
    }
  }

  int fd_;
  int read_ms_, write_ms_;
  char buf_[4096];
  size_t off_ = 0, len_ = 0;
};

/// httplib's server with its connection loop taken over (HTTP parsing stays httplib's,
/// Server::process_request): the same keep-alive loop, but the thread knows its socket (tl_socket), so
/// handlers can notice a client that went away; and a listen backlog fit for many clients at once.
class HttpServer final : public httplib::Server {
 public:
  /// The listen queue of the bound socket (httplib listens with a backlog of 5).
  void set_backlog(int n) {
    const socket_t s = svr_sock_;
    if (s != INVALID_SOCKET) ::listen(s, n);
  }

 private:
  bool process_and_close_socket(socket_t sock) override {
    bool ret = false;
    {
      // Stream chunks are small writes: without TCP_NODELAY, Nagle's algorithm holds each one back
      // until the previous is acknowledged (up to the peer's delayed-ACK time, 40 ms on Linux).
      const int on = 1;
      ::setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
      SocketStream strm(sock, read_timeout_sec_, write_timeout_sec_);
      tl_socket = sock;
      std::size_t count = keep_alive_max_count_;
      while (count > 0 && wait_for_request(sock)) {
        bool connection_closed = false;
        ret = process_request(strm, count == 1, connection_closed, nullptr);
        if (!ret || connection_closed) break;
        --count;
      }
      tl_socket = -1;
    }
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    return ret;
  }

  /// Waits up to the keep-alive timeout for the next request's bytes (false: timed out, the server
  /// stopped, or the peer closed).
  bool wait_for_request(socket_t sock) const {
    const auto deadline = Clock::now() + std::chrono::seconds(keep_alive_timeout_sec_);
    while (svr_sock_ != INVALID_SOCKET) {
      pollfd p{sock, POLLIN, 0};
      const int n = ::poll(&p, 1, 50);
      if (n > 0) return !(p.revents & POLLNVAL);
      if (n < 0 && errno != EINTR) return false;
      if (Clock::now() >= deadline) return false;
    }
    return false;
  }
};

// ---------------------------------------------------------------- requests and their channels

/// One API request between its HTTP thread and the engine thread.
struct Job {
  openai::Request req;
  eng::GenerationRequest gen;
  std::string id;
  std::int64_t created = 0;
  Clock::time_point arrived;

  // Engine thread only.
  eng::RequestId engine_id = 0;
  Clock::time_point submitted, last_token;
  bool got_first = false, cancel_sent = false;
  std::string engine_error;  ///< the forward call threw while this request ran

  // The channel: under mu.
  enum class State { queued, running, done, failed };
  std::mutex mu;
  std::condition_variable cv;
  State state = State::queued;
  std::string text;  ///< decoded text of the tokens so far (special tokens skipped)
  eng::GenerationResult result;
  std::optional<ApiError> error;

  std::atomic<bool> cancelled{false};  ///< set by the HTTP thread when the client went away
};

/// A place among max_concurrent; released when the last holder goes.
struct Slot {
  explicit Slot(std::atomic<std::size_t>& n) : n_(n) {}
  ~Slot() { n_.fetch_sub(1); }
  Slot(const Slot&) = delete;
  Slot& operator=(const Slot&) = delete;
  std::atomic<std::size_t>& n_;
};

ApiError server_error(int status, const std::string& message) {
  return ApiError(status, "server_error", message);
}

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

/// Whether the JSON text nests arrays / objects deeper than `limit` (a linear scan, strings skipped).
/// Bodies are refused past it before they are parsed: a parsed value's serialisation recurses once
/// per level, and a 16 MiB body can nest millions of levels.
bool nests_deeper_than(std::string_view text, std::size_t limit) {
  std::size_t depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return false;
}

/// Constant-time comparison (an API key must not leak through timing).
bool same_secret(const std::string& a, const std::string& b) {
  if (a.size() != b.size() || b.empty()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

// ---------------------------------------------------------------- the server

struct Server::Impl {
  Impl(std::unique_ptr<eng::Engine> e, std::shared_ptr<const eng::Tokenizer> t, std::string name, ServeOptions o)
      : engine(std::move(e)), tokenizer(std::move(t)), model_name(std::move(name)), opt(std::move(o)),
        metrics(model_name), started(unix_now()) {
    context_tokens = engine->model().config().max_position_embeddings;
  }

  std::unique_ptr<eng::Engine> engine;
  std::shared_ptr<const eng::Tokenizer> tokenizer;
  std::string model_name;
  ServeOptions opt;
  Metrics metrics;
  std::int64_t started;
  std::size_t context_tokens = 0;
  HttpServer http;
  int bound_port = -1;

  // Engine thread's inbox.
  std::mutex inbox_mu;
  std::condition_variable inbox_cv;
  std::deque<std::shared_ptr<Job>> inbox;
  bool stopping = false;
  std::thread engine_thread;

  std::atomic<std::size_t> in_flight{0};

  // ---- replies

  void reply_error(httplib::Response& res, const ApiError& e) {
    res.status = e.status;
    res.set_content(openai::error_body(e).dump(), "application/json");
    metrics.count_response(e.status);
  }

  bool authorized(const httplib::Request& req) const {
    if (opt.api_key.empty()) return true;
    const std::string h = req.get_header_value("Authorization");
    static const std::string bearer = "Bearer ";
    return h.size() > bearer.size() && h.compare(0, bearer.size(), bearer) == 0 &&
           same_secret(h.substr(bearer.size()), opt.api_key);
  }

  ApiError unauthorized() const {
    return ApiError(401, "authentication_error",
                    "Incorrect or missing API key: give it as the header 'Authorization: Bearer <key>'", "",
                    "invalid_api_key");
  }

  // ---- the engine thread

  /// Moves a job to a final state and wakes its HTTP thread.
  static void finish(Job& job, std::optional<eng::GenerationResult> result, std::optional<ApiError> error) {
    {
      std::lock_guard lock(job.mu);
      if (result) {
        job.result = std::move(*result);
        job.state = Job::State::done;
      } else {
        job.error = std::move(error);
        job.state = Job::State::failed;
      }
    }
    job.cv.notify_all();
  }

  void wake_engine() {
    { std::lock_guard lock(inbox_mu); }
    inbox_cv.notify_all();
  }

  void submit(const std::shared_ptr<Job>& job) {
    Job* j = job.get();
    j->gen.on_token = [this, j](eng::TokenId t) {
      const auto now = Clock::now();
      if (!j->got_first) metrics.first_token(seconds_between(j->arrived, now));
      else metrics.inter_token(seconds_between(j->last_token, now));
      j->got_first = true;
      j->last_token = now;
      const bool text = t >= 0 && static_cast<std::size_t>(t) < tokenizer->vocab_size() && !tokenizer->is_special(t);
      {
        std::lock_guard lock(j->mu);
        if (text) j->text += tokenizer->token_bytes(t);
      }
      j->cv.notify_all();
    };
    j->submitted = Clock::now();
    j->engine_id = engine->submit(j->gen);  // throws std::invalid_argument (e.g. a schema that does not compile)
    {
      std::lock_guard lock(j->mu);
      j->state = Job::State::running;
    }
    j->cv.notify_all();
  }

  void engine_loop() {
    std::deque<std::shared_ptr<Job>> pending;                       // accepted, not yet submitted
    std::unordered_map<eng::RequestId, std::shared_ptr<Job>> active;  // submitted to the engine
    const auto queue_timeout = std::chrono::duration<double>(opt.queue_timeout_s);
    for (;;) {
      {
        std::unique_lock lock(inbox_mu);
        if (!stopping && inbox.empty() && pending.empty() && !engine->has_unfinished())
          inbox_cv.wait_for(lock, std::chrono::milliseconds(200));
        if (stopping) break;
        while (!inbox.empty()) {
          pending.push_back(std::move(inbox.front()));
          inbox.pop_front();
        }
      }
      const auto now = Clock::now();
      // Queued requests whose client left, or that waited too long.
      for (auto it = pending.begin(); it != pending.end();) {
        Job& j = **it;
        if (j.cancelled) {
          finish(j, std::nullopt, server_error(499, "the client closed the connection"));
        } else if (now - j.arrived > queue_timeout) {
          finish(j, std::nullopt,
                 server_error(503, "the server is overloaded: the request waited " +
                                       std::to_string(opt.queue_timeout_s) + " s for the engine; retry later"));
        } else {
          ++it;
          continue;
        }
        it = pending.erase(it);
      }
      for (auto& [id, j] : active)
        if (j->cancelled && !j->cancel_sent) {
          engine->cancel(id);
          j->cancel_sent = true;
        }
      // Admission: keep the engine's running set full and its own queue short, so that requests wait
      // here, where the queue time limit applies.
      while (!pending.empty() && engine->n_running() + engine->n_waiting() < opt.max_num_seqs) {
        std::shared_ptr<Job> j = std::move(pending.front());
        pending.pop_front();
        try {
          submit(j);
          active.emplace(j->engine_id, j);
        } catch (const std::invalid_argument& e) {
          finish(*j, std::nullopt, ApiError(400, "invalid_request_error", e.what(), "response_format"));
        } catch (const std::exception& e) {
          finish(*j, std::nullopt, server_error(500, e.what()));
        }
      }
      if (engine->has_unfinished()) {
        std::vector<eng::FinishedRequest> done;
        try {
          done = engine->step();
        } catch (const std::exception& e) {
          // The forward call failed: the running requests are left mid-step; cancel them all (the
          // next step() finishes them) and tell their clients.
          spdlog::error("serve: engine step failed: {}", e.what());
          for (auto& [id, j] : active) {
            j->engine_error = e.what();
            engine->cancel(id);
            j->cancel_sent = true;
          }
        }
        for (auto& f : done) {
          const auto it = active.find(f.id);
          if (it == active.end()) continue;
          std::shared_ptr<Job> j = std::move(it->second);
          active.erase(it);
          complete(*j, std::move(f));
        }
      }
      publish_engine(pending.size());
    }
    // Stopping: everything still here is answered 503.
    for (auto& [id, j] : active) engine->cancel(id);
    for (int i = 0; i < 4 && engine->has_unfinished(); ++i) {
      try {
        engine->step();
      } catch (const std::exception&) {
        break;
      }
    }
    const ApiError bye = server_error(503, "the server is shutting down");
    for (auto& [id, j] : active) finish(*j, std::nullopt, bye);
    for (auto& j : pending) finish(*j, std::nullopt, bye);
    std::lock_guard lock(inbox_mu);
    for (auto& j : inbox) finish(*j, std::nullopt, bye);
    inbox.clear();
  }

  void complete(Job& j, eng::FinishedRequest f) {
    const auto now = Clock::now();
    const auto& s = f.result.stats;
    const double queue_s = seconds_between(j.arrived, j.submitted) + s.queue_s;
    if (!f.error.empty()) {
      metrics.finished("abort", s.prompt_tokens, f.result.tokens.size(), s.cached_tokens, queue_s,
                       seconds_between(j.arrived, now));
      if (!j.engine_error.empty())
        finish(j, std::nullopt, server_error(500, "the engine failed: " + j.engine_error));
      else if (f.result.finish == eng::FinishReason::cancelled)
        finish(j, std::nullopt, server_error(499, "the client closed the connection"));
      else  // e.g. the prompt can never fit the KV cache
        finish(j, std::nullopt, ApiError(400, "invalid_request_error", f.error, "messages"));
      return;
    }
    metrics.finished(openai::finish_reason(f.result.finish), s.prompt_tokens, f.result.tokens.size(), s.cached_tokens,
                     queue_s, seconds_between(j.arrived, now));
    finish(j, std::move(f.result), std::nullopt);
  }

  void publish_engine(std::size_t pending) {
    const auto& st = engine->stats();
    EngineSnapshot s;
    s.running = engine->n_running();
    s.waiting = engine->n_waiting() + pending;
    s.kv_used_blocks = st.kv_used_blocks;
    s.kv_cached_blocks = st.kv_cached_blocks;
    s.kv_max_blocks = st.kv_max_blocks;
    s.prefix_hit_tokens = st.prefix_hit_tokens;
    s.draft_tokens = st.draft_tokens;
    s.accepted_tokens = st.accepted_tokens;
    s.prefill_tokens = st.prefill_tokens;
    s.decode_tokens = st.decode_tokens;
    metrics.set_engine(s);
  }

  // ---- HTTP handlers

  void handle_completion(const httplib::Request& req, httplib::Response& res, openai::Endpoint endpoint) {
    const auto arrived = Clock::now();
    if (!authorized(req)) return reply_error(res, unauthorized());
    auto job = std::make_shared<Job>();
    job->arrived = arrived;
    try {
      if (nests_deeper_than(req.body, kMaxBodyDepth))
        throw ApiError(400, "invalid_request_error",
                       "the request body nests JSON deeper than " + std::to_string(kMaxBodyDepth) + " levels");
      json body;
      try {
        body = json::parse(req.body);
      } catch (const json::parse_error& e) {
        throw ApiError(400, "invalid_request_error", std::string("the request body is not valid JSON: ") + e.what());
      }
      job->req = openai::parse_request(body, endpoint);
      if (job->req.model != model_name)
        throw ApiError(404, "invalid_request_error",
                       "The model '" + job->req.model + "' does not exist; this server serves '" + model_name + "'",
                       "model", "model_not_found");
      job->gen = openai::to_generation_request(job->req, *tokenizer, context_tokens, opt.max_tokens);
      if (opt.max_prompt_tokens > 0 && job->gen.prompt.size() > opt.max_prompt_tokens)
        throw ApiError(400, "invalid_request_error",
                       "the prompt has " + std::to_string(job->gen.prompt.size()) +
                           " tokens, more than this server's limit of " + std::to_string(opt.max_prompt_tokens),
                       endpoint == openai::Endpoint::chat_completions ? "messages" : "prompt",
                       "context_length_exceeded");
    } catch (const ApiError& e) {
      return reply_error(res, e);
    } catch (const std::exception& e) {  // e.g. a chat template the tokenizer cannot render
      return reply_error(res, ApiError(400, "invalid_request_error", e.what()));
    }
    if (in_flight.fetch_add(1) >= opt.max_concurrent) {
      in_flight.fetch_sub(1);
      return reply_error(res, ApiError(429, "rate_limit_error",
                                       "too many requests at once (the limit is " + std::to_string(opt.max_concurrent) +
                                           "); retry later",
                                       "", "rate_limit_exceeded"));
    }
    auto slot = std::make_shared<Slot>(in_flight);
    job->id = openai::make_id(endpoint == openai::Endpoint::chat_completions ? "chatcmpl-" : "cmpl-");
    job->created = unix_now();
    {
      std::lock_guard lock(inbox_mu);
      if (stopping) return reply_error(res, server_error(503, "the server is shutting down"));
      inbox.push_back(job);
    }
    inbox_cv.notify_all();

    // Until the engine takes it (or refuses it): the status is not decided before.
    if (!wait(*job, [&] { return job->state != Job::State::queued; })) return client_gone(res);
    if (!job->req.stream) {
      if (!wait(*job, [&] { return job->state == Job::State::done || job->state == Job::State::failed; }))
        return client_gone(res);
      std::lock_guard lock(job->mu);
      if (job->state == Job::State::failed) return reply_error(res, *job->error);
      res.set_content(openai::response_body(job->req, job->id, job->created, job->result).dump(-1, ' ', false,
                                                                                               ojson::error_handler_t::replace),
                      "application/json");
      metrics.count_response(200);
      return;
    }
    {
      std::lock_guard lock(job->mu);
      if (job->state == Job::State::failed) return reply_error(res, *job->error);
    }
    stream(res, job, slot);
  }

  /// The client left before its answer: nothing can reach it (nginx's 499, not counted).
  static void client_gone(httplib::Response& res) {
    res.status = 499;
    res.set_content(R"({"error":{"message":"client closed the connection"}})", "application/json");
  }

  /// Waits on the job's channel until `ready` (under the job's lock); false if the client went away
  /// first (the request is then cancelled).
  template <class Pred>
  bool wait(Job& job, Pred ready) {
    const int fd = tl_socket;
    std::unique_lock lock(job.mu);
    while (!job.cv.wait_for(lock, std::chrono::milliseconds(50), ready)) {
      lock.unlock();
      const bool gone = peer_closed(fd);
      lock.lock();
      if (gone) {
        cancel(job);
        return false;
      }
    }
    return true;
  }

  void cancel(Job& job) {
    job.cancelled = true;
    wake_engine();
  }

  /// The server-sent events of a streaming request: a first chunk with the role, text deltas as the
  /// engine produces tokens, a last chunk with the finish reason, the usage chunk when asked for, then
  /// [DONE]. A failure after the headers went out is sent as an error event (as OpenAI does).
  void stream(httplib::Response& res, const std::shared_ptr<Job>& job, const std::shared_ptr<Slot>& slot) {
    struct State {
      std::shared_ptr<Job> job;
      std::shared_ptr<Slot> slot;
      TextDeltas deltas;
      std::size_t seen = 0;  ///< bytes of the job's text looked at (some may be held back)
      bool started = false, ended = false;
      Clock::time_point last_write = Clock::now();
    };
    auto st = std::make_shared<State>(State{job, slot, TextDeltas(job->req.stop)});
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    metrics.count_response(200);
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, st](std::size_t, httplib::DataSink& sink) {
          Job& j = *st->job;
          const openai::Request& r = j.req;
          std::string out;
          if (!st->started) {
            if (r.endpoint == openai::Endpoint::chat_completions)
              out += sse_event(openai::chunk_body(r, j.id, j.created, "", true, nullptr));
            st->started = true;
          }
          {
            std::unique_lock lock(j.mu);
            auto fresh = [&] {
              return j.state == Job::State::done || j.state == Job::State::failed || j.text.size() > st->seen;
            };
            if (out.empty()) j.cv.wait_for(lock, std::chrono::milliseconds(50), fresh);
            if (j.state == Job::State::done) {
              const std::string delta = st->deltas.finish(j.result.text);
              if (!delta.empty()) out += sse_event(openai::chunk_body(r, j.id, j.created, delta, false, nullptr));
              out += sse_event(openai::chunk_body(r, j.id, j.created, "", false, openai::finish_reason(j.result.finish)));
              if (r.include_usage) out += sse_event(openai::usage_chunk_body(r, j.id, j.created, j.result));
              out += kSseDone;
              st->ended = true;
            } else if (j.state == Job::State::failed) {
              out += sse_event(openai::error_body(*j.error));
              st->ended = true;
            } else {
              st->seen = j.text.size();
              const std::string delta = st->deltas.next(j.text);
              if (!delta.empty()) out += sse_event(openai::chunk_body(r, j.id, j.created, delta, false, nullptr));
            }
          }
          const auto now = Clock::now();
          if (out.empty()) {
            if (peer_closed(tl_socket)) return false;
            if (now - st->last_write < std::chrono::seconds(10)) return true;
            out = kSseKeepAlive;  // keeps proxies from timing the stream out; a write also finds a dead peer
          }
          if (!sink.write(out.data(), out.size())) return false;
          st->last_write = now;
          if (st->ended) sink.done();
          return true;
        },
        [this, st](bool success) {
          if (!success || !st->ended) cancel(*st->job);
          st->slot.reset();
        });
  }

  ojson model_object() const {
    ojson m;
    m["id"] = model_name;
    m["object"] = "model";
    m["created"] = started;
    m["owned_by"] = "quarry";
    m["max_model_len"] = context_tokens;
    return m;
  }

  void handle_models(const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req)) return reply_error(res, unauthorized());
    res.set_content(ojson{{"object", "list"}, {"data", ojson::array({model_object()})}}.dump(), "application/json");
  }

  void handle_model(const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req)) return reply_error(res, unauthorized());
    const std::string id = req.matches.size() > 1 ? req.matches[1].str() : "";
    if (id != model_name)
      return reply_error(res, ApiError(404, "invalid_request_error", "The model '" + id + "' does not exist", "model",
                                       "model_not_found"));
    res.set_content(model_object().dump(), "application/json");
  }

  void routes() {
    http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      handle_completion(req, res, openai::Endpoint::chat_completions);
    });
    http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      handle_completion(req, res, openai::Endpoint::completions);
    });
    http.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) { handle_models(req, res); });
    http.Get(R"(/v1/models/(.+))",
             [this](const httplib::Request& req, httplib::Response& res) { handle_model(req, res); });
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      bool down;
      {
        std::lock_guard lock(inbox_mu);
        down = stopping;
      }
      res.status = down ? 503 : 200;
      res.set_content(down ? R"({"status":"stopping"})" : R"({"status":"ok"})", "application/json");
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics.render(), "text/plain; version=0.0.4; charset=utf-8");
    });
    // Errors httplib answers itself (no route, body too large, a request it could not read): an
    // OpenAI error object instead of an empty body.
    http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      std::string message;
      if (res.status == 404) message = "Invalid URL (" + req.method + " " + req.path + ")";
      else if (res.status == 413)
        message = "the request body is larger than this server's limit of " + std::to_string(opt.max_body_bytes) +
                  " bytes";
      else if (res.status == 405) message = "method " + req.method + " is not allowed on " + req.path;
      else message = "the request could not be read (HTTP " + std::to_string(res.status) + ")";
      const int status = res.status;
      res.set_content(openai::error_body(ApiError(status, status >= 500 ? "server_error" : "invalid_request_error",
                                                  message))
                          .dump(),
                      "application/json");
      metrics.count_response(status);
    });
    http.set_exception_handler([this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "unknown error";
      try {
        if (ep) std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      spdlog::error("serve: handler failed: {}", what);
      reply_error(res, server_error(500, "internal error: " + what));
    });
  }
};

Server::Server(std::unique_ptr<eng::Engine> engine, std::shared_ptr<const eng::Tokenizer> tokenizer,
               std::string model_name, ServeOptions options)
    : impl_(std::make_unique<Impl>(std::move(engine), std::move(tokenizer), std::move(model_name), std::move(options))) {
  auto& o = impl_->opt;
  if (o.max_concurrent == 0) o.max_concurrent = 1;
  if (o.max_num_seqs == 0) o.max_num_seqs = 1;
  const std::size_t threads = o.http_threads ? o.http_threads : o.max_concurrent + 16;
  impl_->http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  impl_->http.set_payload_max_length(o.max_body_bytes);
  impl_->http.set_keep_alive_max_count(1000);
  impl_->http.set_read_timeout(30, 0);
  impl_->http.set_write_timeout(30, 0);
  impl_->routes();
}

Server::~Server() {
  stop();
  if (impl_->engine_thread.joinable()) impl_->engine_thread.join();
}

int Server::bind() {
  auto& im = *impl_;
  if (im.opt.port == 0) {
    im.bound_port = im.http.bind_to_any_port(im.opt.host);
    if (im.bound_port < 0) throw std::runtime_error("serve: cannot bind " + im.opt.host + " (any port)");
  } else {
    if (!im.http.bind_to_port(im.opt.host, im.opt.port))
      throw std::runtime_error("serve: cannot bind " + im.opt.host + ":" + std::to_string(im.opt.port) +
                               " (in use, or not an address of this machine)");
    im.bound_port = im.opt.port;
  }
  im.http.set_backlog(SOMAXCONN);
  return im.bound_port;
}

int Server::port() const { return impl_->bound_port; }

void Server::serve() {
  auto& im = *impl_;
  if (im.bound_port < 0) bind();
  im.engine_thread = std::thread([&im] { im.engine_loop(); });
  // The listener is stopped from here, once: httplib's stop() does nothing before the listener runs
  // (a stop() between bind() and its start would be lost), and must not run twice at once.
  std::atomic<bool> listening_done{false};
  std::thread stopper([&im, &listening_done] {
    bool stopped = false;
    while (!listening_done) {
      bool stopping;
      {
        std::lock_guard lock(im.inbox_mu);
        stopping = im.stopping;
      }
      if (stopping && !stopped && im.http.is_running()) {
        im.http.stop();
        stopped = true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  im.http.listen_after_bind();
  listening_done = true;
  stopper.join();
  {
    std::lock_guard lock(im.inbox_mu);
    im.stopping = true;
  }
  im.inbox_cv.notify_all();
  if (im.engine_thread.joinable()) im.engine_thread.join();
}

void Server::stop() {
  auto& im = *impl_;
  {
    std::lock_guard lock(im.inbox_mu);
    im.stopping = true;
  }
  im.inbox_cv.notify_all();  // the engine thread answers what is in flight; serve()'s stopper stops the listener
}

}  // namespace quarry::serve
