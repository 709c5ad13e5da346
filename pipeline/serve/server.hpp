// `quarry serve`: an OpenAI-compatible HTTP server on the embedded engine.
//
//   POST /v1/chat/completions, POST /v1/completions   (pipeline/openai: bodies, responses, chunks;
//                                                      `stream: true` answers with server-sent events)
//   GET  /v1/models, GET /health, GET /metrics        (Prometheus text, pipeline/serve/metrics.hpp)
//
// Threads: cpp-httplib's pool runs one thread per connection; each request is parsed, checked and
// tokenized there, then put on the engine thread's queue, and its thread waits on the request's own
// channel (a mutex + condition variable) for text and the result. One engine thread owns the Engine
// (not thread-safe): it admits queued requests (Engine::submit; the on_token callback appends the
// token's text to the request's channel), calls step() while anything runs -- so every connection's
// requests form one continuous batch and share the prefix cache -- and cancels the requests whose
// client went away (vLLM's AsyncLLM over EngineCore, in one process).
//
// Limits, each answered with an OpenAI error object and never a crash: a body larger than
// max_body_bytes (413), a prompt over max_prompt_tokens or the model's context (400), more than
// max_concurrent requests in the server (429), a request not admitted by the engine within
// queue_timeout_s (503), a missing or wrong API key (401), an unknown model (404).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "engine/runtime/engine.hpp"
#include "engine/tokenizer/tokenizer.hpp"

namespace quarry::serve {

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                         ///< 0: a free port chosen by the system (see Server::port)
  std::string api_key;                     ///< non-empty: /v1/* need `Authorization: Bearer <api_key>`
  std::size_t max_body_bytes = 16u << 20;  ///< larger request bodies: 413
  std::size_t max_concurrent = 256;        ///< requests in the server at once (queued + running); more: 429
  double queue_timeout_s = 60.0;           ///< longer before the engine admits a request: 503
  std::size_t max_prompt_tokens = 0;       ///< longer prompts: 400 (0: the model's context)
  std::size_t max_tokens = 0;              ///< cap on a request's max_tokens (0: what the context leaves)
  std::size_t max_num_seqs = 64;           ///< the engine's running set (EngineOptions::max_num_seqs)
  std::size_t http_threads = 0;            ///< connection threads (0: max_concurrent + 16)
};

class Server {
 public:
  /// `model_name`: the name /v1/models lists and requests must give (the model folder's name).
  Server(std::unique_ptr<engine::Engine> engine, std::shared_ptr<const engine::Tokenizer> tokenizer,
         std::string model_name, ServeOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /// Binds the listening socket; returns the port. Throws std::runtime_error naming host and port.
  int bind();
  /// Serves until stop() (bind() first): returns once the listener, the connections and the engine
  /// thread have ended. Requests still in flight are cancelled and answered 503.
  void serve();
  /// Thread-safe; not async-signal-safe (call it from a thread that waits for the signal).
  void stop();
  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace quarry::serve
