// `quarry submit`: the inputs, discovered by the run's own discover stage, published as tasks.
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <thread>

#include <nlohmann/json.hpp>

#include "pipeline/extract/input_file.hpp"
#include "pipeline/queue/nats_client.hpp"
#include "pipeline/queue/queue.hpp"
#include "pipeline/run/source_name.hpp"
#include "pipeline/run/stages.hpp"

namespace quarry::queue {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Closes a descriptor on scope exit.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

/// Reads the whole (small) file; false on a read error.
bool read_all(int fd, std::uint64_t size, std::string& out) {
  out.resize(size);
  std::uint64_t got = 0;
  while (got < size) {
    const auto n = ::pread(fd, out.data() + got, size - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    got += static_cast<std::uint64_t>(n);
  }
  return true;
}

}  // namespace

std::string schema_id(const std::string& schema_text) {
  return "sha256:" + extract::sha256_of_bytes(schema_text).substr(0, 16);
}

std::string task_id(const std::string& sha256, const std::string& task, const std::string& schema, const std::string& source) {
  std::string key = sha256;
  key += '\n';
  key += task;
  key += '\n';
  key += schema;
  key += '\n';
  key += source;
  return extract::sha256_of_bytes(key);
}

void check_queue_job(const run::JobSpec& job) {
  if (job.queue.url.empty()) throw std::runtime_error("no NATS server given (--queue nats://HOST:4222, or `url` in [queue])");
  try {
    (void)job_names(job.queue.job);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(e.what());
  }
  if (job.task != run::Task::kie)
    throw std::runtime_error(std::string("the ") + run::task_name(job.task) +
                             " task does not run over the queue yet (run it with `quarry run`, or split it with --shard)");
  if (job.shard_count > 1) throw std::runtime_error("--shard and --queue do not go together (the queue spreads the work)");
  if (job.queue.max_deliver < 2) throw std::runtime_error("--max-deliver must be at least 2 (one try and the error record)");
}

SubmitResult submit(const run::JobSpec& job, run::RunControl& control, const std::function<void(const std::string&)>& log) {
  check_queue_job(job);
  const auto t0 = std::chrono::steady_clock::now();
  const auto names = job_names(job.queue.job);
  std::string schema_text;
  {
    std::ifstream in(job.schema, std::ios::binary);
    if (!in) throw std::runtime_error(job.schema.string() + ": cannot open the schema");
    schema_text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const std::string schema = schema_id(schema_text);
  const std::string task = run::task_name(job.task);

  Connection conn(job.queue, "quarry submit " + job.queue.job, Connection::Reconnect::bounded);
  if (const auto a = ensure_job(conn, job.queue, names); !a.differs.empty() && log) log("submit: warning: " + a.differs);
  // Room for the headers beside the bytes of an inline document.
  const std::uint64_t payload_room =
      conn.max_payload() > 16384 ? static_cast<std::uint64_t>(conn.max_payload()) - 16384 : 0;
  const std::uint64_t inline_max = std::min<std::uint64_t>(job.queue.inline_kb * 1024, payload_room);

  // Publishes, retrying through reconnects: the message id makes a retry of a stored message a duplicate.
  const auto publish_retrying = [&](const std::string& subject, const std::string& id,
                                    const std::vector<std::pair<std::string, std::string>>& headers,
                                    const std::string& body) {
    const auto first = std::chrono::steady_clock::now();
    for (int attempt = 0;; ++attempt) {
      try {
        return publish(conn, subject, id, headers, body.data(), body.size());
      } catch (const QueueError& e) {
        if (conn.closed() || since(first) > job.queue.reconnect_s || control.stop_level.load() > 0)
          throw QueueError(std::string(e.what()) + " (the NATS server at " + conn.url() + " was not reachable for " +
                           std::to_string(static_cast<int>(since(first))) +
                           " s; submit again: tasks already published are not duplicated)");
        if (attempt == 0 && log) log(std::string("submit: ") + e.what() + "; retrying");
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
      }
    }
  };

  // Discovery is the run's own stage, on its thread, sending InputMsg through an inproc socket.
  run::RunOptions ropts;
  ropts.log = log;
  run::stages::Shared sh(job, control, ropts);
  zmq::context_t zctx;
  auto pull = run::stages::make_socket(zctx, zmq::socket_type::pull, 64);
  pull.bind("inproc://submit");
  auto push = run::stages::make_socket(zctx, zmq::socket_type::push, 64);
  push.connect("inproc://submit");
  pull.set(zmq::sockopt::rcvtimeo, 100);
  std::thread discover([&] {
    run::stages::guarded(sh, "discover", [&] { run::stages::discover_stage(sh, push); });
    sh.discover_done = true;
  });

  SubmitResult r;
  std::size_t received = 0;
  std::string failure;
  try {
    for (;;) {
      if (sh.failed || control.stop_level.load() > 0) break;
      if (sh.discover_done.load() && received >= sh.discovered.load()) break;
      auto m = run::recv(pull);
      if (!m) continue;
      auto* in = std::get_if<run::InputMsg>(&*m);
      if (!in) throw std::runtime_error("submit: unexpected message");
      ++received;
      json t = {{"v", 1}, {"source", in->source}};
      if (!in->source_b64.empty()) t["source_base64"] = in->source_b64;
      std::error_code ec;
      auto abs = fs::absolute(fs::path(in->path), ec);
      const std::string path = ec ? in->path : abs.lexically_normal().string();
      if (run::is_utf8(path)) t["path"] = path;
      else t["path_base64"] = run::base64(path);
      std::string problem = in->problem, sha, body;
      std::uint64_t size = 0;
      if (problem.empty()) {
        std::string reason;
        const auto fd = extract::open_input(in->path, job.extract.max_file_mb << 20, size, reason);
        if (!fd) {
          problem = reason;
        } else {
          Fd guard{*fd};
          if (size <= inline_max) {
            if (read_all(*fd, size, body)) sha = extract::sha256_of_bytes(body);
            else problem = std::string("read error: ") + std::strerror(errno);
          } else if (auto h = extract::sha256_of_fd(*fd, reason)) {
            sha = *h;
          } else {
            problem = reason;
          }
        }
      }
      if (!problem.empty()) {
        body.clear();
        t["problem"] = problem;
      }
      t["sha256"] = sha;
      t["size"] = size;
      t["task"] = task;
      t["schema"] = schema;
      t["inline"] = problem.empty() && size <= inline_max;
      const std::string id = task_id(sha, task, schema, in->source);
      const auto p = publish_retrying(names.tasks_subject, id,
                                      {{"Quarry-Task", t.dump(-1, ' ', false, json::error_handler_t::replace)}}, body);
      if (p.duplicate) ++r.duplicates;
      else ++r.published;
      if (t["inline"].get<bool>()) ++r.inline_docs;
    }
  } catch (const std::exception& e) {
    failure = e.what();
  }
  zctx.shutdown();  // ends discovery if it is still going (its send fails with ETERM)
  discover.join();
  push.close();
  pull.close();
  zctx.close();
  if (!failure.empty()) throw QueueError(failure + " (" + std::to_string(r.published + r.duplicates) + " of " +
                                         std::to_string(received) + " task(s) published)");
  if (sh.failed) throw std::runtime_error(sh.fatal);
  r.discovered = sh.discovered.load();
  if (received < r.discovered || r.published + r.duplicates < received) {  // stopped: no summary
    r.wall_s = since(t0);
    return r;
  }
  // The summary tells collect how many tasks the job has now (every stored task took the next sequence).
  const auto state = tasks_state(conn, names);
  r.tasks_last_seq = state.first;
  const json summary = {{"tasks_last_seq", r.tasks_last_seq},
                        {"discovered", r.discovered},
                        {"published", r.published},
                        {"duplicates", r.duplicates}};
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string summary_id = "submit-" + std::string(host) + "-" + std::to_string(::getpid()) + "-" +
                                 std::to_string(std::chrono::system_clock::now().time_since_epoch().count());
  publish_retrying(names.submitted_subject, summary_id, {}, summary.dump());
  r.wall_s = since(t0);
  return r;
}

}  // namespace quarry::queue
