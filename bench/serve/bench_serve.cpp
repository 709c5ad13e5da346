// Load test of `quarry serve`: N concurrent streaming clients for a bounded time, each sending chat
// completions with a JSON Schema (response_format json_schema, stream, include_usage) one after the
// other. Every answer is checked: HTTP 200, the SSE wire format ending in [DONE], one finish chunk,
// the usage chunk, and the streamed text valid for the schema. Reports requests, failures, TTFT
// p50 / p99 (from sending the request to the first content delta), end-to-end latency and generated
// tokens per second over the run.
//
//   bench_serve [--url http://127.0.0.1:8000] [--clients 64] [--duration 60] [--max-tokens 160]
//               [--model DIR] [--threads N] [--device cpu] [-o results.json]
//
// -o writes the figures as JSON and the server's /metrics after the run beside it (results.metrics.txt).
//
// Without --url it starts the server in this process (the bundled model) on a free port of 127.0.0.1.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/runtime/engine.hpp"
#include "engine/tokenizer/tokenizer.hpp"
#include "pipeline/paths.hpp"
#include "pipeline/serve/server.hpp"
#include "schemas/validate.hpp"

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

const json kSchema = json::parse(R"({
  "type": "object",
  "properties": {
    "invoice_number": {"type": "string", "maxLength": 24},
    "issue_date": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"},
    "seller_name": {"type": "string", "maxLength": 40},
    "currency": {"type": "string", "enum": ["EUR", "HUF", "USD", "GBP"]},
    "total": {"type": "string", "maxLength": 16}
  },
  "required": ["invoice_number", "issue_date", "seller_name", "currency", "total"],
  "additionalProperties": false})");

const char* kDocs[] = {
    "INVOICE No. A-2024-0117\nDate: 2024-03-14\nSeller: Kovacs es Tarsa Kft.\nTotal due: 127,000 HUF",
    "Rechnung Nr. RE-88120\nRechnungsdatum: 02.05.2024\nVerkaeufer: Muller GmbH\nGesamtbetrag: 1.234,50 EUR",
    "Facture FA-2024-331\nDate: 17/06/2024\nVendeur: Dupont SARL\nTotal TTC: 845.20 EUR",
    "Invoice INV-5521\nIssued 2024-01-09 by Acme Ltd\nAmount payable: USD 310.00",
    "Szamla szama: SZ-2024/0042\nKelt: 2024.09.30\nElado: Nagy Bt.\nFizetendo: 56 900 Ft",
    "Invoice 7781-B\nDate 2024-11-02\nFrom: Northwind Traders\nTotal GBP 1,020.75",
};

struct Sample {
  bool ok = false;
  std::string error;
  double ttft_s = 0, e2e_s = 0;
  std::size_t completion_tokens = 0;
};

/// One streaming request; checks everything a client relies on.
Sample one_request(httplib::Client& c, const std::string& model, std::size_t max_tokens, std::size_t doc) {
  Sample s;
  json body = {{"model", model},
               {"messages", json::array({{{"role", "system"},
                                          {"content", "Extract the invoice's number, issue date (YYYY-MM-DD), seller, "
                                                      "currency and total as JSON."}},
                                         {{"role", "user"}, {"content", kDocs[doc % std::size(kDocs)]}}})},
               {"max_tokens", max_tokens},
               {"temperature", 0.7},
               {"seed", doc},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}},
               {"response_format",
                {{"type", "json_schema"}, {"json_schema", {{"name", "invoice"}, {"strict", true}, {"schema", kSchema}}}}}};
  const auto t0 = Clock::now();
  std::string buf, text;
  bool first = true, done = false;
  std::size_t finish_chunks = 0;
  std::string finish_reason;
  json usage;
  std::string protocol_error;
  auto on_event = [&](const std::string& event) {
    if (event.empty() || event[0] == ':') return;
    if (event.rfind("data: ", 0) != 0) {
      protocol_error = "not an SSE data line: " + event.substr(0, 60);
      return;
    }
    const std::string data = event.substr(6);
    if (data == "[DONE]") {
      done = true;
      return;
    }
    const json chunk = json::parse(data, nullptr, false);
    if (chunk.is_discarded()) {
      protocol_error = "chunk is not JSON";
      return;
    }
    if (chunk.contains("error")) {
      protocol_error = "error event: " + chunk["error"].dump();
      return;
    }
    if (chunk.contains("usage") && chunk["usage"].is_object()) usage = chunk["usage"];
    if (!chunk.contains("choices") || chunk["choices"].empty()) return;
    const auto& ch = chunk["choices"][0];
    if (ch.contains("delta") && ch["delta"].contains("content") && ch["delta"]["content"].is_string()) {
      const std::string d = ch["delta"]["content"];
      if (!d.empty() && first) {
        s.ttft_s = std::chrono::duration<double>(Clock::now() - t0).count();
        first = false;
      }
      text += d;
    }
    if (ch.contains("finish_reason") && ch["finish_reason"].is_string()) {
      ++finish_chunks;
      finish_reason = ch["finish_reason"];
    }
  };
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  int status = 0;
  req.response_handler = [&](const httplib::Response& r) {
    status = r.status;
    return true;
  };
  std::string error_body;
  req.content_receiver = [&](const char* data, std::size_t n, std::uint64_t, std::uint64_t) {
    if (status != 200) {
      error_body.append(data, n);
      return true;
    }
    buf.append(data, n);
    std::size_t pos;
    while ((pos = buf.find("\n\n")) != std::string::npos) {
      on_event(buf.substr(0, pos));
      buf.erase(0, pos + 2);
    }
    return true;
  };
  const auto res = c.send(req);
  s.e2e_s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!res) {
    s.error = "transport: " + httplib::to_string(res.error());
  } else if (status != 200) {
    s.error = "HTTP " + std::to_string(status) + ": " + error_body.substr(0, 200);
  } else if (!protocol_error.empty()) {
    s.error = protocol_error;
  } else if (!done || !buf.empty()) {
    s.error = "the stream did not end with data: [DONE]";
  } else if (finish_chunks != 1) {
    s.error = std::to_string(finish_chunks) + " chunks with a finish_reason";
  } else if (!usage.is_object()) {
    s.error = "no usage chunk";
  } else if (finish_reason != "stop") {
    s.error = "finish_reason " + finish_reason + " (max_tokens too small for the schema?)";
  } else {
    static const quarry::schemas::Validator validator(kSchema, "invoice");
    const json doc = json::parse(text, nullptr, false);
    if (doc.is_discarded()) {
      s.error = "output is not JSON: " + text.substr(0, 100);
    } else if (const auto v = validator.validate(doc); !v.empty()) {
      s.error = "output not valid for the schema: " + v[0].pointer + " " + v[0].message;
    } else {
      s.ok = true;
      s.completion_tokens = usage.value("completion_tokens", 0);
    }
  }
  return s;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = p * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(rank);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - static_cast<double>(lo));
}

}  // namespace

int main(int argc, char** argv) {
  std::string url, model_dir, device = "cpu", out_path;
  std::size_t clients = 64, max_tokens = 160, threads = 0, max_num_seqs = 64;
  double duration = 60;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_serve: %s needs a value\n", a.c_str());
        std::exit(1);
      }
      return argv[++i];
    };
    if (a == "--url") url = next();
    else if (a == "--clients") clients = std::stoul(next());
    else if (a == "--duration") duration = std::stod(next());
    else if (a == "--max-tokens") max_tokens = std::stoul(next());
    else if (a == "--model") model_dir = next();
    else if (a == "--threads") threads = std::stoul(next());
    else if (a == "--max-num-seqs") max_num_seqs = std::stoul(next());
    else if (a == "--device") device = next();
    else if (a == "-o") out_path = next();
    else {
      std::fprintf(stderr,
                   "usage: bench_serve [--url URL] [--clients N] [--duration S] [--max-tokens N] [--model DIR] "
                   "[--threads N] [--max-num-seqs N] [--device D] [-o FILE]\n");
      return a == "--help" ? 0 : 1;
    }
  }

  std::unique_ptr<quarry::serve::Server> server;
  std::thread server_thread;
  std::string host = "127.0.0.1", model_name;
  int port = 0;
  if (url.empty()) {
    if (model_dir.empty()) model_dir = quarry::default_model_dir().string();
    auto tok = quarry::engine::Tokenizer::from_dir(model_dir);
    quarry::engine::EngineOptions eo;
    eo.n_threads = threads;
    eo.max_num_seqs = max_num_seqs;
    eo.device = quarry::engine::parse_device(device);
    auto engine = quarry::engine::Engine::open(model_dir, tok, eo);
    quarry::serve::ServeOptions so;
    so.port = 0;
    so.max_num_seqs = max_num_seqs;
    so.max_concurrent = std::max<std::size_t>(256, clients * 2);
    model_name = std::filesystem::path(model_dir).lexically_normal().filename().string();
    server = std::make_unique<quarry::serve::Server>(std::move(engine), tok, model_name, so);
    port = server->bind();
    server_thread = std::thread([&] { server->serve(); });
  } else {
    const auto colon = url.rfind(':');
    host = url.substr(url.find("//") + 2, colon - url.find("//") - 2);
    port = std::stoi(url.substr(colon + 1));
  }
  {
    httplib::Client c(host, port);
    const auto r = c.Get("/v1/models");
    if (!r || r->status != 200) {
      std::fprintf(stderr, "bench_serve: GET /v1/models failed\n");
      return 1;
    }
    model_name = json::parse(r->body)["data"][0]["id"];
  }

  std::fprintf(stderr, "bench_serve: %zu clients for %.0f s against http://%s:%d (model %s)\n", clients, duration,
               host.c_str(), port, model_name.c_str());
  std::mutex mu;
  std::vector<Sample> samples;
  const auto t_start = Clock::now();
  const auto deadline = t_start + std::chrono::duration<double>(duration);
  std::vector<std::thread> pool;
  for (std::size_t k = 0; k < clients; ++k)
    pool.emplace_back([&, k] {
      httplib::Client c(host, port);
      c.set_read_timeout(300, 0);
      c.set_connection_timeout(30, 0);
      c.set_keep_alive(true);
      std::size_t n = k;
      while (Clock::now() < deadline) {
        Sample s = one_request(c, model_name, max_tokens, n++);
        std::lock_guard lock(mu);
        samples.push_back(std::move(s));
      }
    });
  for (auto& t : pool) t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - t_start).count();

  std::string metrics_text;
  {
    httplib::Client c(host, port);
    if (auto r = c.Get("/metrics"); r && r->status == 200) metrics_text = r->body;
  }
  if (server) {
    server->stop();
    server_thread.join();
  }

  std::vector<double> ttft, e2e;
  std::size_t ok = 0, tokens = 0;
  std::map<std::string, std::size_t> errors;
  for (const auto& s : samples) {
    if (s.ok) {
      ++ok;
      tokens += s.completion_tokens;
      ttft.push_back(s.ttft_s);
      e2e.push_back(s.e2e_s);
    } else {
      ++errors[s.error.substr(0, 120)];
    }
  }
  json out = {{"clients", clients},
              {"duration_s", duration},
              {"wall_s", wall},
              {"requests", samples.size()},
              {"ok", ok},
              {"failed", samples.size() - ok},
              {"errors", errors},
              {"ttft_p50_s", percentile(ttft, 0.5)},
              {"ttft_p99_s", percentile(ttft, 0.99)},
              {"e2e_p50_s", percentile(e2e, 0.5)},
              {"e2e_p99_s", percentile(e2e, 0.99)},
              {"completion_tokens", tokens},
              {"tok_s", wall > 0 ? static_cast<double>(tokens) / wall : 0.0},
              {"requests_per_s", wall > 0 ? static_cast<double>(ok) / wall : 0.0},
              {"hardware_threads", std::thread::hardware_concurrency()}};
  std::cout << out.dump(2) << "\n";
  if (!out_path.empty()) {
    std::ofstream(out_path) << out.dump(2) << "\n";
    std::filesystem::path metrics_path = out_path;
    metrics_path.replace_extension(".metrics.txt");
    std::ofstream(metrics_path) << metrics_text;  // the server's /metrics after the run
  }
  return samples.size() == ok && ok > 0 ? 0 : 2;
}
