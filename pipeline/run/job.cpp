#include "pipeline/run/job.hpp"

#include <sys/resource.h>
#include <toml++/toml.h>

#include <algorithm>
#include <thread>

#include <set>
#include <sstream>
#include <tuple>
#include <stdexcept>

#include "engine/backend/backend.hpp"
#include "pipeline/openai/batch_format.hpp"
#include "pipeline/paths.hpp"
#include "schemas/schemas.hpp"

namespace quarry::run {

namespace eng = quarry::engine;

const char* task_name(Task t) {
  switch (t) {
    case Task::kie: return "kie";
    case Task::rag: return "rag";
    case Task::batch: return "batch";
  }
  return "?";
}

namespace {

[[noreturn]] void fail(const std::filesystem::path& file, const std::string& key, const std::string& why) {
  throw std::runtime_error(file.string() + ": " + key + ": " + why);
}

void check_keys(const toml::table& t, const std::set<std::string>& allowed, const std::filesystem::path& file,
                const std::string& where) {
  for (const auto& [k, v] : t) {
    (void)v;
    if (!allowed.count(std::string(k.str())))
      fail(file, where + std::string(k.str()), "unknown key (allowed: see `quarry run --help`)");
  }
}

std::string get_string(const toml::table& t, const char* key, const std::filesystem::path& file,
                       const std::string& prefix = "") {
  const auto* n = t.get(key);
  if (!n) return {};
  if (!n->is_string()) fail(file, prefix + key, "expected a string");
  return std::string(*n->value<std::string>());
}

template <class T>
void get_uint(const toml::table& t, const char* key, T& out, const std::filesystem::path& file,
              const std::string& prefix = "") {
  const auto* n = t.get(key);
  if (!n) return;
  if (!n->is_integer() || *n->value<std::int64_t>() < 0) fail(file, prefix + key, "expected a non-negative integer");
  out = static_cast<T>(*n->value<std::int64_t>());
}

void get_float(const toml::table& t, const char* key, float& out, const std::filesystem::path& file,
               const std::string& prefix = "") {
  const auto* n = t.get(key);
  if (!n) return;
  if (!n->is_number()) fail(file, prefix + key, "expected a number");
  const double v = *n->value<double>();
  if (v < 0 || v > 100) fail(file, prefix + key, "expected a number in [0, 100]");
  out = static_cast<float>(v);
}

std::filesystem::path relative_to(const std::filesystem::path& base, const std::string& p) {
  if (p.empty()) return {};
  std::filesystem::path q(p);
  return q.is_absolute() ? q : base / q;
}

}  // namespace

JobSpec load_job_file(const std::filesystem::path& path) {
  toml::table root;
  try {
    root = toml::parse_file(path.string());
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << path.string() << ":" << e.source().begin.line << ":" << e.source().begin.column << ": " << e.description();
    throw std::runtime_error(os.str());
  }
  check_keys(root,
             {"inputs", "task", "schema", "prompts", "questions", "model", "output", "prefer", "cross_check", "retries", "retry_errors",
              "shard", "engine", "extract", "queue"},
             path, "");
  const auto base = path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path();
  JobSpec job;
  if (const auto* in = root.get("inputs")) {
    const auto add = [&](const toml::node& n) {
      if (!n.is_string()) fail(path, "inputs", "expected a string or an array of strings");
      const std::string s(*n.value<std::string>());
      job.inputs.push_back(std::filesystem::path(s).is_absolute() ? s : (base / s).lexically_normal().string());
    };
    if (const auto* arr = in->as_array()) {
      for (const auto& n : *arr) add(n);
    } else {
      add(*in);
    }
  }
  if (const auto task = get_string(root, "task", path); !task.empty()) {
    if (task == "kie") job.task = Task::kie;
    else if (task == "rag") job.task = Task::rag;
    else if (task == "batch") job.task = Task::batch;
    else fail(path, "task", "\"" + task + "\" is not one of \"kie\", \"rag\", \"batch\"");
    job.task_set = true;
  }
  job.schema = relative_to(base, get_string(root, "schema", path));
  job.prompts = relative_to(base, get_string(root, "prompts", path));
  job.questions = relative_to(base, get_string(root, "questions", path));
  job.model = relative_to(base, get_string(root, "model", path));
  job.output = relative_to(base, get_string(root, "output", path));
  if (const auto prefer = get_string(root, "prefer", path); !prefer.empty()) {
    if (prefer == "auto") job.prefer = Prefer::automatic;
    else if (prefer == "model") job.prefer = Prefer::model;
    else fail(path, "prefer", "\"" + prefer + "\" is not one of \"auto\", \"model\"");
  }
  if (const auto* n = root.get("cross_check")) {
    if (!n->is_boolean()) fail(path, "cross_check", "expected true or false");
    job.cross_check = *n->value<bool>();
  }
  get_uint(root, "retries", job.retries, path);
  if (const auto* n = root.get("retry_errors")) {
    if (!n->is_boolean()) fail(path, "retry_errors", "expected true or false");
    job.retry_errors = *n->value<bool>();
  }
  if (const auto shard = get_string(root, "shard", path); !shard.empty()) {
    try {
      std::tie(job.shard_index, job.shard_count) = parse_shard(shard);
    } catch (const std::invalid_argument& e) {
      fail(path, "shard", e.what());
    }
  }
  if (const auto* e = root.get("engine")) {
    const auto* t = e->as_table();
    if (!t) fail(path, "engine", "expected a table");
    check_keys(*t,
               {"threads", "max_tokens", "max_inflight", "mtp_depth", "kv_cache_mb", "compute", "device", "tensor_parallel",
                "temperature", "retry_temperature", "seed", "grounding", "max_context", "state_snapshot_tokens",
                "max_state_snapshots"},
               path, "engine.");
    if (const auto g = get_string(*t, "grounding", path, "engine."); !g.empty()) {
      if (g != "on" && g != "off") fail(path, "engine.grounding", "\"" + g + "\" is not one of \"on\", \"off\"");
      job.engine.grounding = g == "on";
    }
    get_uint(*t, "threads", job.engine.threads, path, "engine.");
    get_uint(*t, "max_tokens", job.engine.max_tokens, path, "engine.");
    get_uint(*t, "max_inflight", job.engine.max_inflight, path, "engine.");
    get_uint(*t, "mtp_depth", job.engine.mtp_depth, path, "engine.");
    get_uint(*t, "kv_cache_mb", job.engine.kv_cache_mb, path, "engine.");
    get_uint(*t, "tensor_parallel", job.engine.tensor_parallel, path, "engine.");
    if (job.engine.tensor_parallel == 0) fail(path, "engine.tensor_parallel", "must be at least 1");
    get_uint(*t, "max_context", job.engine.max_context, path, "engine.");
    get_uint(*t, "state_snapshot_tokens", job.engine.state_snapshot_tokens, path, "engine.");
    get_uint(*t, "max_state_snapshots", job.engine.max_state_snapshots, path, "engine.");
    if (const auto c = get_string(*t, "compute", path, "engine."); !c.empty()) {
      if (c != "auto" && c != "exact" && c != "bf16")
        fail(path, "engine.compute", "\"" + c + "\" is not one of \"auto\", \"exact\", \"bf16\"");
      job.engine.compute = c;
    }
    if (const auto d = get_string(*t, "device", path, "engine."); !d.empty()) {
      try {
        (void)eng::parse_device(d);
      } catch (const std::invalid_argument& e) {
        fail(path, "engine.device", e.what());
      }
      job.engine.device = d;
    }
    get_float(*t, "temperature", job.engine.temperature, path, "engine.");
    get_float(*t, "retry_temperature", job.engine.retry_temperature, path, "engine.");
    get_uint(*t, "seed", job.engine.seed, path, "engine.");
  }
  if (const auto* e = root.get("extract")) {
    const auto* t = e->as_table();
    if (!t) fail(path, "extract", "expected a table");
    check_keys(*t,
               {"threads", "pdf_password", "isolation", "timeout_s", "memory_mb", "max_file_mb", "max_text_mb",
                "max_page_text_mb", "max_attachment_mb", "max_pages", "max_content_mb", "max_page_content_mb"},
               path, "extract.");
    get_uint(*t, "threads", job.extract_threads, path, "extract.");
    job.extract.pdf_password = get_string(*t, "pdf_password", path, "extract.");
    if (const auto* n = t->get("isolation")) {
      if (!n->is_boolean()) fail(path, "extract.isolation", "expected true or false");
      job.extract.isolation = *n->value<bool>();
    }
    if (const auto* n = t->get("timeout_s")) {
      if (!n->is_number() || *n->value<double>() < 0 || *n->value<double>() > 86400)
        fail(path, "extract.timeout_s", "expected a number of seconds in [0, 86400]");
      job.extract.timeout_s = *n->value<double>();
    }
    get_uint(*t, "memory_mb", job.extract.memory_mb, path, "extract.");
    get_uint(*t, "max_file_mb", job.extract.max_file_mb, path, "extract.");
    get_uint(*t, "max_text_mb", job.extract.max_text_mb, path, "extract.");
    get_uint(*t, "max_page_text_mb", job.extract.max_page_text_mb, path, "extract.");
    get_uint(*t, "max_content_mb", job.extract.max_content_mb, path, "extract.");
    get_uint(*t, "max_page_content_mb", job.extract.max_page_content_mb, path, "extract.");
    get_uint(*t, "max_attachment_mb", job.extract.max_attachment_mb, path, "extract.");
    get_uint(*t, "max_pages", job.extract.max_pages, path, "extract.");
  }
  if (const auto* e = root.get("queue")) {
    const auto* t = e->as_table();
    if (!t) fail(path, "queue", "expected a table");
    check_keys(*t,
               {"url", "job", "creds", "user", "password", "token", "tls", "tls_ca", "tls_cert", "tls_key", "ack_wait_s",
                "max_deliver", "inline_kb", "dedupe_window_s", "reconnect_s", "idle_exit_s"},
               path, "queue.");
    auto& q = job.queue;
    q.url = get_string(*t, "url", path, "queue.");
    q.job = get_string(*t, "job", path, "queue.");
    q.creds = relative_to(base, get_string(*t, "creds", path, "queue.")).string();
    q.user = get_string(*t, "user", path, "queue.");
    q.password = get_string(*t, "password", path, "queue.");
    q.token = get_string(*t, "token", path, "queue.");
    if (const auto* n = t->get("tls")) {
      if (!n->is_boolean()) fail(path, "queue.tls", "expected true or false");
      q.tls = *n->value<bool>();
    }
    q.tls_ca = relative_to(base, get_string(*t, "tls_ca", path, "queue.")).string();
    q.tls_cert = relative_to(base, get_string(*t, "tls_cert", path, "queue.")).string();
    q.tls_key = relative_to(base, get_string(*t, "tls_key", path, "queue.")).string();
    const auto seconds = [&](const char* key, double& out, double lo, double hi) {
      const auto* n = t->get(key);
      if (!n) return;
      if (!n->is_number() || *n->value<double>() < lo || *n->value<double>() > hi)
        fail(path, std::string("queue.") + key,
             "expected a number of seconds in [" + std::to_string(static_cast<long>(lo)) + ", " +
                 std::to_string(static_cast<long>(hi)) + "]");
      out = *n->value<double>();
    };
    seconds("ack_wait_s", q.ack_wait_s, 1, 86400);
    seconds("dedupe_window_s", q.dedupe_window_s, 1, 30 * 86400);
    seconds("reconnect_s", q.reconnect_s, 0, 86400);
    seconds("idle_exit_s", q.idle_exit_s, 0, 30 * 86400);
    get_uint(*t, "max_deliver", q.max_deliver, path, "queue.");
    get_uint(*t, "inline_kb", q.inline_kb, path, "queue.");
    if (q.max_deliver < 2) fail(path, "queue.max_deliver", "expected at least 2 (one try and the error record)");
  }
  return job;
}

std::vector<std::string> fit_to_machine(JobSpec& job, std::size_t hardware_threads, std::uint64_t open_files) {
  std::vector<std::string> warnings;
  const std::size_t hw = std::max<std::size_t>(1, hardware_threads);
  const std::size_t by_cpu = k_extract_threads_per_core * hw;
  const std::size_t by_files =
      open_files > k_open_files_reserved + k_open_files_per_extract_thread
          ? static_cast<std::size_t>((open_files - k_open_files_reserved) / k_open_files_per_extract_thread)
          : 1;
  const std::size_t max_extract = std::max<std::size_t>(1, std::min(by_cpu, by_files));
  if (job.extract_threads > max_extract) {
    warnings.push_back("extract threads: " + std::to_string(job.extract_threads) + " is more than this machine can use: clamped to " +
                       std::to_string(max_extract) + " (at most " + std::to_string(k_extract_threads_per_core) +
                       " per hardware thread, " + std::to_string(hw) + " here; and " +
                       std::to_string(k_open_files_per_extract_thread) + " open files each within the limit of " +
                       std::to_string(open_files) + ")");
    job.extract_threads = max_extract;
  }
  if (job.engine.threads > hw) {
    warnings.push_back("engine threads: " + std::to_string(job.engine.threads) + " is more than the " + std::to_string(hw) +
                       " hardware threads of this machine: clamped to " + std::to_string(hw));
    job.engine.threads = hw;
  }
  return warnings;
}

std::uint64_t raise_open_file_limit() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return 1024;
  if (lim.rlim_cur < lim.rlim_max) {
    rlimit raised = lim;
    raised.rlim_cur = lim.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) lim = raised;
  }
  return lim.rlim_cur == RLIM_INFINITY ? (1ull << 20) : static_cast<std::uint64_t>(lim.rlim_cur);
}

std::vector<std::string> fit_to_this_machine(JobSpec& job) {
  rlimit lim{};
  std::uint64_t files = 1024;
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0)
    files = lim.rlim_cur == RLIM_INFINITY ? (1ull << 20) : static_cast<std::uint64_t>(lim.rlim_cur);
  return fit_to_machine(job, std::thread::hardware_concurrency(), files);
}

void resolve_defaults(JobSpec& job, bool needs_output) {
  if (job.inputs.empty()) throw std::runtime_error("no inputs given (paths, folders or glob patterns)");
  if (needs_output && job.output.empty()) throw std::runtime_error("no output folder given (-o DIR, or `output` in the job file)");
  if (!job.task_set &&
      std::any_of(job.inputs.begin(), job.inputs.end(), [](const std::string& p) { return openai::looks_like_batch_file(p); }))
    job.task = Task::batch;
  if (job.cross_check && job.prefer != Prefer::model)
    throw std::runtime_error(
        "--cross-check (cross_check in a job file) compares the model's values with an e-invoice's XML: it needs "
        "--prefer model (prefer = \"model\"), else the XML alone is read");
  if (job.cross_check && job.task != Task::kie)
    throw std::runtime_error(std::string("--cross-check (cross_check in a job file) is for task kie, not ") +
                             task_name(job.task));
  if (job.task == Task::batch && job.shard_count > 1)
    throw std::runtime_error("--shard is not supported for OpenAI Batch files yet (split the file instead)");
  if (job.task == Task::batch)
    for (const auto& p : job.inputs)
      if (!std::filesystem::is_regular_file(p))
        throw std::runtime_error(p + ": a batch input must be a regular file (an OpenAI Batch .jsonl file)");
  if (job.model.empty()) job.model = quarry::default_model_dir();
  if (!std::filesystem::is_directory(job.model))
    throw std::runtime_error(job.model.string() + ": model folder not found (give --model DIR or set QUARRY_HOME)");
  if (job.schema.empty())
    job.schema = schemas::schema_dir() / (job.task == Task::kie ? "invoice.schema.json" : "rag_answer.schema.json");
  if (!std::filesystem::is_regular_file(job.schema)) throw std::runtime_error(job.schema.string() + ": schema file not found");
  if (job.prompts.empty()) job.prompts = job.model / "prompts.json";
  if (!std::filesystem::is_regular_file(job.prompts))
    throw std::runtime_error(job.prompts.string() + ": prompt templates not found (give --prompts FILE)");
  if (job.task == Task::rag) {
    if (job.questions.empty()) throw std::runtime_error("task rag needs a questions file (--questions FILE)");
    if (!std::filesystem::is_regular_file(job.questions))
      throw std::runtime_error(job.questions.string() + ": questions file not found");
  }
  if (job.engine.max_inflight == 0) job.engine.max_inflight = 1;
  if (job.extract_threads == 0) job.extract_threads = 1;
  if (job.engine.max_tokens == 0) throw std::runtime_error("engine.max_tokens must be at least 1");
  const auto& x = job.extract;
  if (x.memory_mb != 0 && x.memory_mb < 128)
    throw std::runtime_error("extract memory limit of " + std::to_string(x.memory_mb) +
                             " MiB is too small for an extraction worker (at least 128, or 0 for none)");
  for (const auto& [name, v] : {std::pair<const char*, std::uint64_t>{"max_file_mb", x.max_file_mb},
                                {"max_text_mb", x.max_text_mb},
                                {"max_page_text_mb", x.max_page_text_mb},
                                {"max_attachment_mb", x.max_attachment_mb},
                                {"max_pages", x.max_pages},
                                {"max_content_mb", x.max_content_mb},
                                {"max_page_content_mb", x.max_page_content_mb}})
    if (v == 0 || v > (1u << 20)) throw std::runtime_error(std::string("extract.") + name + " must be in [1, 1048576]");
}

std::pair<std::size_t, std::size_t> parse_shard(const std::string& text) {
  const auto slash = text.find('/');
  const auto number = [&](const std::string& part) -> std::size_t {
    if (part.empty() || part.size() > 9 || part.find_first_not_of("0123456789") != std::string::npos)
      throw std::invalid_argument("\"" + text + "\" is not I/N (two whole numbers, 0 <= I < N)");
    return static_cast<std::size_t>(std::stoul(part));
  };
  if (slash == std::string::npos) number("");
  const std::size_t i = number(text.substr(0, slash)), n = number(text.substr(slash + 1));
  if (n == 0 || i >= n) throw std::invalid_argument("\"" + text + "\": the shard index must be below the count (0 <= I < N)");
  return {i, n};
}

std::size_t shard_of(const std::string& sha256_hex, const std::string& source, std::size_t count) {
  if (count <= 1) return 0;
  std::uint64_t h = 0;
  if (sha256_hex.size() >= 16 && sha256_hex.find_first_not_of("0123456789abcdef") == std::string::npos) {
    h = std::stoull(sha256_hex.substr(0, 16), nullptr, 16);
  } else {
    h = 14695981039346656037ull;  // FNV-1a 64
    for (const unsigned char c : source) h = (h ^ c) * 1099511628211ull;
  }
  return static_cast<std::size_t>(h % count);
}

}  // namespace quarry::run
