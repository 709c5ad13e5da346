// `quarry serve`: the OpenAI-compatible HTTP server (pipeline/serve/server.hpp) on the embedded engine.
//
// The model's name (the folder's name) is what /v1/models lists and what requests give as `model`.
// SIGINT / SIGTERM stop it: the listener closes, requests in flight are answered 503 (streams end),
// and the command exits 0. Exit codes: 0 stopped by a signal; 1 usage error, a model that cannot be
// loaded, or an address that cannot be bound.
#include <pthread.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "engine/runtime/engine.hpp"
#include "engine/tokenizer/tokenizer.hpp"
#include "pipeline/cli/commands.hpp"
#include "pipeline/paths.hpp"
#include "pipeline/serve/server.hpp"

namespace quarry::cli {

namespace {

namespace eng = quarry::engine;

struct ServeArgs {
  std::string model;
  serve::ServeOptions server;
  double max_body_mb = 16;
  std::size_t threads = 0, mtp = 0, kv_cache_mb = 0, max_num_seqs = 64, tensor_parallel = 1;
  std::string compute = "auto", device = "auto";
};

int run_serve(ServeArgs a) {
  std::string model_dir = a.model;
  if (model_dir.empty()) {
    model_dir = quarry::default_model_dir().string();
    if (!std::filesystem::is_directory(model_dir))
      throw std::runtime_error(model_dir + ": default model folder not found (give --model DIR or set QUARRY_HOME)");
  }
  std::string name = std::filesystem::path(model_dir).lexically_normal().filename().string();
  if (name.empty() || name == "." || name == "..")
    name = std::filesystem::weakly_canonical(model_dir).filename().string();

  // SIGINT / SIGTERM are taken by a waiting thread (blocked here, before any thread starts, so that
  // every thread inherits the mask) and turned into Server::stop().
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto tok = eng::Tokenizer::from_dir(model_dir);
  eng::EngineOptions opt;
  opt.n_threads = a.threads;
  opt.mtp_depth = a.mtp;
  opt.kv_cache_mb = a.kv_cache_mb;
  opt.max_num_seqs = a.max_num_seqs;
  opt.compute = eng::parse_compute(a.compute);
  opt.device = eng::parse_device(a.device);
  opt.tensor_parallel = a.tensor_parallel;
  opt.log = [](std::string_view msg) { spdlog::info("{}", msg); };
  auto engine = eng::Engine::open(model_dir, tok, opt);

  a.server.max_body_bytes = static_cast<std::size_t>(a.max_body_mb * 1024 * 1024);
  a.server.max_num_seqs = a.max_num_seqs;
  serve::Server server(std::move(engine), tok, name, a.server);
  const int port = server.bind();
  spdlog::info("serve: model '{}' on http://{}:{} (POST /v1/chat/completions, /v1/completions; GET /v1/models, "
               "/health, /metrics){}",
               name, a.server.host, port, a.server.api_key.empty() ? "" : "; API key required");

  std::atomic<bool> served{false};
  std::thread waiter([&] {
    const timespec tick{0, 100'000'000};
    while (!served) {
      const int sig = sigtimedwait(&signals, nullptr, &tick);
      if (sig > 0) {
        spdlog::info("serve: {} received, stopping", sig == SIGINT ? "SIGINT" : "SIGTERM");
        server.stop();
        break;
      }
    }
  });
  server.serve();
  served = true;
  waiter.join();
  spdlog::info("serve: stopped");
  return 0;
}

}  // namespace

void add_serve_command(CLI::App& app, Context& ctx) {
  auto a = std::make_shared<ServeArgs>();
  auto* sub = app.add_subcommand("serve", "OpenAI-compatible HTTP server on the embedded engine");
  sub->footer(
      "Endpoints: POST /v1/chat/completions and /v1/completions (stream: true -> server-sent events),\n"
      "GET /v1/models, GET /health, GET /metrics (Prometheus text). SIGINT / SIGTERM stop the server.");
  sub->add_option("--host", a->server.host, "Address to listen on")->capture_default_str();
  sub->add_option("--port", a->server.port, "Port to listen on (0: any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  sub->add_option("--model", a->model,
                  "Model folder (config.json, safetensors, tokenizer.json); its name is the model's name in the "
                  "API; default: models/quarry-extract-11m")
      ->check(CLI::ExistingDirectory);
  sub->add_option("--api-key", a->server.api_key,
                  "Require 'Authorization: Bearer KEY' on /v1/* (401 otherwise); default: no key");
  sub->add_option("--device", a->device,
                  "cpu, cuda, cuda:N, or auto (the first GPU when this build has the CUDA backend and a GPU is "
                  "present, else the CPU)")
      ->capture_default_str();
  sub->add_option("--tensor-parallel", a->tensor_parallel, "Split the model over N devices (tensor parallelism: cuda:I .. cuda:I+N-1 from --device cuda:I)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  sub->add_option("--threads", a->threads, "Engine threads (0: all cores)")->capture_default_str();
  sub->add_option("--compute", a->compute,
                  "auto (the checkpoint's dtype), exact (f32) or bf16")
      ->check(CLI::IsMember({"auto", "exact", "bf16"}))
      ->capture_default_str();
  sub->add_option("--mtp,--mtp-depth", a->mtp, "MTP speculative decoding: draft depth cap (0: off; output unchanged)")
      ->capture_default_str();
  sub->add_option("--kv-cache-mb", a->kv_cache_mb, "KV-cache budget in MiB (0: engine default)")->capture_default_str();
  sub->add_option("--max-num-seqs", a->max_num_seqs, "Requests in the engine's running set (one continuous batch)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{4096}))
      ->capture_default_str();
  sub->add_option("--max-concurrent", a->server.max_concurrent,
                  "Requests in the server at once, queued and running; more are answered 429 (one connection thread each)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{4096}))
      ->capture_default_str();
  sub->add_option("--queue-timeout", a->server.queue_timeout_s,
                  "Seconds a request may wait for the engine before it is answered 503")
      ->check(CLI::Range(0.001, 1e6))
      ->capture_default_str();
  sub->add_option("--max-body-mb", a->max_body_mb, "Request bodies larger than this (MiB) are answered 413")
      ->check(CLI::Range(0.001, 4096.0))
      ->capture_default_str();
  sub->add_option("--max-prompt-tokens", a->server.max_prompt_tokens,
                  "Longer prompts are answered 400 (0: the model's context)")
      ->capture_default_str();
  sub->add_option("--max-tokens", a->server.max_tokens,
                  "Cap on a request's max_tokens (0: what the model's context leaves)")
      ->capture_default_str();
  sub->callback([a, &ctx] {
    try {
      ctx.exit_code = run_serve(*a);
    } catch (const std::exception& e) {
      spdlog::error("serve: {}", e.what());
      ctx.exit_code = 1;
    }
  });
}

}  // namespace quarry::cli
