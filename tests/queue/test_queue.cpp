// The queue roles (`quarry submit`, `worker`, `collect`) on a private `nats-server -js`: every document
// exactly once in the collected results with two workers killed with -9 while they hold tasks and the
// server restarted once; the collected report equal to a local run's; a poison document (its worker dies
// every time) ending as one `error` record; progress acks keeping a task held longer than the ack wait;
// submit and collect failing clearly when the server is down.
// QUARRY_QUEUE_DOCS sets the number of documents of the first test (default 48; the 300 with
// QUARRY_QUEUE_DOCS=300). Skipped, with the reason, where nats-server is not installed.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "pipeline/queue/nats_client.hpp"
#include "pipeline/queue/queue.hpp"
#include "pipeline/run/job.hpp"
#include "tests/queue/queue_support.hpp"

namespace {

using namespace quarry::test_queue;
namespace qq = quarry::queue;
using nlohmann::json;

#define REQUIRE_NATS_SERVER(var)                                                                   \
  const auto var = find_nats_server();                                                             \
  if (!var) GTEST_SKIP() << "nats-server is not installed (scripts/setup.sh installs it: apt-get install nats-server)"

/// `n` distinct XML e-invoices (the samples, each with a comment naming its copy: other bytes) and
/// the sample text invoices (the model's path) in `dir`.
std::vector<fs::path> make_inputs(const fs::path& dir, std::size_t n, std::size_t text_docs) {
  auto files = make_copies(dir, n);
  for (std::size_t i = 0; i < files.size(); ++i) std::ofstream(files[i], std::ios::app) << "\n<!-- copy " << i << " -->\n";
  const fs::path samples = fs::path(QUARRY_SOURCE_DIR) / "samples" / "invoices";
  std::size_t added = 0;
  for (const char* name : {"en-txt-1.txt", "de-txt-1.txt", "hu-txt-1.txt"}) {
    if (added++ >= text_docs) break;
    fs::copy_file(samples / name, dir / name, fs::copy_options::overwrite_existing);
    files.push_back(dir / name);
  }
  return files;
}

/// The options every role of these tests takes: small and quick on 2 shared cores. The consumer's ack
/// wait and max deliveries are set by whichever role creates the job first (here: submit).
std::vector<std::string> job_options(const std::string& url, const std::string& job, int ack_wait_s = 2,
                                     int max_deliver = 5) {
  return {"--queue",   url, "--job",      job,  "--threads",    "1", "--max-tokens",  "24", "--max-inflight",
          "2",         "--retries", "0",  "--progress", "none", "--ack-wait", std::to_string(ack_wait_s),
          "--max-deliver", std::to_string(max_deliver)};
}

std::vector<std::string> cat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

/// Sources of the records in results.jsonl, with how many times each is there.
std::map<std::string, int> sources_of(const fs::path& out) {
  std::map<std::string, int> m;
  for (const auto& r : read_records(out / "results.jsonl")) ++m[r["source"].get<std::string>()];
  return m;
}

/// The part of a report that describes the records (not this run's times).
json records_part(const fs::path& out) {
  const auto r = json::parse(read_file(out / "report.json"));
  return {{"records", r["records"]},
          {"by_status", r["by_status"]},
          {"by_method", r["by_method"]},
          {"failures_by_rule", r["failures_by_rule"]}};
}

TEST(QueueUnit, JobNamesTaskIdsAndSchemaIds) {
  const auto n = qq::job_names("nightly-2024_01");
  EXPECT_EQ(n.tasks_stream, "QUARRY_nightly-2024_01_TASKS");
  EXPECT_EQ(n.results_subject, "quarry.nightly-2024_01.results");
  for (const char* bad : {"", "a.b", "a b", "a*", "a>", "ä"}) EXPECT_THROW(qq::job_names(bad), std::invalid_argument) << bad;
  EXPECT_THROW(qq::job_names(std::string(65, 'a')), std::invalid_argument);
  const std::string sha(64, 'a');
  const auto id = qq::task_id(sha, "kie", "sha256:0011", "in/a.pdf");
  EXPECT_EQ(id.size(), 64u);
  EXPECT_EQ(id, qq::task_id(sha, "kie", "sha256:0011", "in/a.pdf"));
  // Each part makes another id: a changed document, another task or schema, another name.
  EXPECT_NE(id, qq::task_id(std::string(64, 'b'), "kie", "sha256:0011", "in/a.pdf"));
  EXPECT_NE(id, qq::task_id(sha, "rag", "sha256:0011", "in/a.pdf"));
  EXPECT_NE(id, qq::task_id(sha, "kie", "sha256:0012", "in/a.pdf"));
  EXPECT_NE(id, qq::task_id(sha, "kie", "sha256:0011", "in/b.pdf"));
  EXPECT_EQ(qq::schema_id("{}").rfind("sha256:", 0), 0u);
  EXPECT_EQ(qq::schema_id("{}").size(), 7u + 16u);
  EXPECT_NE(qq::schema_id("{}"), qq::schema_id("{ }"));
}

TEST(QueueUnit, JobFileQueueTable) {
  Scratch s("queue_jobfile");
  const auto file = s.dir / "job.toml";
  std::ofstream(file) << "inputs = [\"in\"]\noutput = \"out\"\n[queue]\nurl = \"nats://10.0.0.5:4222\"\njob = \"n1\"\n"
                         "creds = \"my.creds\"\nack_wait_s = 120\nmax_deliver = 6\ninline_kb = 64\nidle_exit_s = 30\n";
  const auto job = quarry::run::load_job_file(file);
  EXPECT_EQ(job.queue.url, "nats://10.0.0.5:4222");
  EXPECT_EQ(job.queue.job, "n1");
  EXPECT_EQ(fs::path(job.queue.creds), s.dir / "my.creds");
  EXPECT_EQ(job.queue.ack_wait_s, 120);
  EXPECT_EQ(job.queue.max_deliver, 6u);
  EXPECT_EQ(job.queue.inline_kb, 64u);
  EXPECT_EQ(job.queue.idle_exit_s, 30);
  std::ofstream(file) << "inputs = [\"in\"]\noutput = \"out\"\n[queue]\nurll = \"x\"\n";
  EXPECT_THROW(quarry::run::load_job_file(file), std::runtime_error);
  std::ofstream(file) << "inputs = [\"in\"]\noutput = \"out\"\n[queue]\nmax_deliver = 1\n";
  EXPECT_THROW(quarry::run::load_job_file(file), std::runtime_error);
}

TEST(QueueE2E, SubmitAndCollectFailClearlyWhenTheServerIsDown) {
  Scratch s("queue_down");
  make_inputs(s.dir / "in", 2, 0);
  const std::string url = "nats://127.0.0.1:" + std::to_string(free_port());  // nobody listens there
  const auto t0 = std::chrono::steady_clock::now();
  const int submit = run_quarry_args(cat({"submit", (s.dir / "in").string()}, job_options(url, "down")), s.dir / "submit.log");
  const int collect = run_quarry_args(cat({"collect", "-o", (s.dir / "out").string()}, job_options(url, "down")),
                                      s.dir / "collect.log");
  EXPECT_EQ(submit, 1);
  EXPECT_EQ(collect, 1);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(60));
  for (const char* log : {"submit.log", "collect.log"}) {
    const auto text = read_file(s.dir / log);
    EXPECT_NE(text.find("cannot connect to the NATS server at " + url), std::string::npos) << log << ":\n" << text;
  }
  EXPECT_FALSE(fs::exists(s.dir / "out" / "results.jsonl") && fs::file_size(s.dir / "out" / "results.jsonl") > 0);
}

TEST(QueueE2E, KilledWorkersAndARestartedServerLoseNothing) {
  REQUIRE_NATS_SERVER(server_bin);
  Scratch s("queue_kill");
  std::size_t n = 48;
  if (const char* e = std::getenv("QUARRY_QUEUE_DOCS")) n = std::max<std::size_t>(12, std::strtoul(e, nullptr, 10));
  const auto files = make_inputs(s.dir / "in", n, 2);
  const auto in = (s.dir / "in").string();
  NatsServer server(*server_bin, s.dir / "nats");
  const auto opts = job_options(server.url(), "kill");
  const auto worker_args = cat({"worker", "--extract-threads", "1"}, opts);
  // Workers hold each task 100 ms after its delivery, so that a kill -9 finds tasks in their hands.
  const std::vector<std::string> env = {"QUARRY_TEST_TASK_DELAY_MS=100"};

  // The workers start before the server: they wait for it (backoff) and connect when it comes.
  Children children;
  std::vector<pid_t> workers;
  for (int i = 0; i < 3; ++i)
    workers.push_back(children.add(spawn_quarry_env(worker_args, s.dir / ("worker" + std::to_string(i) + ".log"), env)));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ASSERT_TRUE(server.start()) << read_file(s.dir / "nats" / "nats-server.log");
  ASSERT_EQ(run_quarry_args(cat({"submit", in}, opts), s.dir / "submit.log"), 0) << read_file(s.dir / "submit.log");
  const auto out = s.dir / "out";
  const pid_t collect =
      children.add(spawn_quarry_env(cat({"collect", "-o", out.string(), "--reconnect", "60"}, opts), s.dir / "collect.log"));
  const auto results = out / "results.jsonl";

  // Two workers killed with -9 while they hold tasks, once a sixth of the records is in.
  const auto wait_lines = [&](std::size_t lines) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(90);
    while (count_lines(results) < lines && std::chrono::steady_clock::now() < end)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return count_lines(results) >= lines;
  };
  ASSERT_TRUE(wait_lines(files.size() / 6)) << read_file(s.dir / "collect.log") << read_file(s.dir / "worker0.log");
  ::kill(workers[0], SIGKILL);
  ::kill(workers[1], SIGKILL);
  EXPECT_EQ(wait_for(workers[0], std::chrono::seconds(10)), 128 + SIGKILL);
  EXPECT_EQ(wait_for(workers[1], std::chrono::seconds(10)), 128 + SIGKILL);

  // The server restarted once (same port, same store) while the third worker and collect run.
  ASSERT_TRUE(wait_lines(files.size() / 2)) << read_file(s.dir / "collect.log");
  server.kill(SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  ASSERT_TRUE(server.start()) << read_file(s.dir / "nats" / "nats-server.log");

  const auto rc = wait_for(collect, std::chrono::seconds(180));
  ASSERT_TRUE(rc.has_value()) << "collect did not finish\n" << read_file(s.dir / "collect.log");
  EXPECT_TRUE(*rc == 0 || *rc == 2) << read_file(s.dir / "collect.log");
  ::kill(workers[2], SIGTERM);
  EXPECT_EQ(wait_for(workers[2], std::chrono::seconds(20)), 0) << read_file(s.dir / "worker2.log");
  // The killed workers held tasks: the survivor was handed them again.
  const auto log2 = read_file(s.dir / "worker2.log");
  const auto at = log2.find(" of the tasks had been delivered before");
  ASSERT_NE(at, std::string::npos) << log2;
  const auto num = log2.rfind("worker: ", at);
  EXPECT_GE(std::stoul(log2.substr(num + 8, at - num - 8)), 1u) << log2;

  // Every document exactly once: none lost, none twice.
  const auto got = sources_of(out);
  std::set<std::string> expected;
  for (const auto& f : files) expected.insert(f.string());
  std::set<std::string> seen;
  for (const auto& [source, count] : got) {
    EXPECT_EQ(count, 1) << source << " is in results.jsonl " << count << " times";
    seen.insert(source);
  }
  EXPECT_EQ(seen, expected);
  EXPECT_EQ(count_lines(results), files.size());

  // The same records and report as a local run of the same documents with the same options.
  const auto local = s.dir / "local";
  run_quarry_args({"run", in, "-o", local.string(), "--threads", "1", "--max-tokens", "24", "--max-inflight", "2",
                   "--retries", "0", "--progress", "none"},
                  s.dir / "local.log");
  EXPECT_EQ(records_part(out), records_part(local));
  std::map<std::string, std::string> a, b;
  for (const auto& r : read_records(out / "results.jsonl")) a[r["source"]] = r["status"].dump() + r["data"].dump();
  for (const auto& r : read_records(local / "results.jsonl")) b[r["source"]] = r["status"].dump() + r["data"].dump();
  EXPECT_EQ(a, b);

  // Collecting again finds everything done and writes nothing.
  EXPECT_EQ(run_quarry_args(cat({"collect", "-o", out.string()}, opts), s.dir / "collect2.log") % 2, 0)
      << read_file(s.dir / "collect2.log");
  EXPECT_EQ(count_lines(results), files.size());
}

TEST(QueueE2E, ProgressAcksKeepALongTaskFromBeingRedelivered) {
  REQUIRE_NATS_SERVER(server_bin);
  Scratch s("queue_progress");
  make_inputs(s.dir / "in", 1, 0);
  NatsServer server(*server_bin, s.dir / "nats");
  ASSERT_TRUE(server.start());
  const auto opts = job_options(server.url(), "progress", 3, 5);  // ack wait 3 s
  ASSERT_EQ(run_quarry_args(cat({"submit", (s.dir / "in").string()}, opts), s.dir / "submit.log"), 0)
      << read_file(s.dir / "submit.log");
  // The task is held 7.5 s (two and a half ack waits) before it enters the pipeline.
  Children children;
  const pid_t worker = children.add(spawn_quarry_env(cat({"worker", "--extract-threads", "1"}, opts), s.dir / "worker.log",
                                                     {"QUARRY_TEST_TASK_DELAY_MS=7500"}));
  const auto out = s.dir / "out";
  const auto rc = wait_for(children.add(spawn_quarry_env(cat({"collect", "-o", out.string()}, opts), s.dir / "collect.log")),
                           std::chrono::seconds(60));
  ASSERT_TRUE(rc.has_value()) << read_file(s.dir / "collect.log");
  EXPECT_EQ(*rc, 0) << read_file(s.dir / "collect.log");
  ::kill(worker, SIGTERM);
  EXPECT_EQ(wait_for(worker, std::chrono::seconds(20)), 0);
  // It was not delivered twice: the progress acks (every quarter of the ack wait) kept it.
  const auto log = read_file(s.dir / "worker.log");
  EXPECT_NE(log.find("worker: 0 of the tasks had been delivered before"), std::string::npos) << log;
  EXPECT_EQ(count_lines(out / "results.jsonl"), 1u);
}

TEST(QueueE2E, PoisonDocumentEndsAsOneErrorRecord) {
  REQUIRE_NATS_SERVER(server_bin);
  Scratch s("queue_poison");
  auto files = make_inputs(s.dir / "in", 5, 0);
  fs::create_directories(s.dir / "in2");
  const auto poison = s.dir / "in2" / "poison-1.xml";
  fs::copy_file(files[0], poison);
  std::ofstream(poison, std::ios::app) << "<!-- poison -->\n";
  NatsServer server(*server_bin, s.dir / "nats");
  ASSERT_TRUE(server.start());
  const auto opts = job_options(server.url(), "poison", 1, 3);
  const auto out = s.dir / "out";
  // Every worker dies when it is handed the poison document; a supervisor starts a new one each time.
  const auto worker_args = cat({"worker", "--extract-threads", "1"}, opts);
  const std::vector<std::string> env = {"QUARRY_TEST_WORKER_EXIT_ON=poison-"};
  Children children;
  std::vector<pid_t> workers;
  int started = 0, died_of_poison = 0;
  const auto supervise = [&] {
    for (auto& w : workers)
      if (auto r = wait_for(w, std::chrono::seconds(0))) {
        EXPECT_EQ(*r, 86);  // the test hook's exit status: nothing else may end a worker here
        ++died_of_poison;
        w = children.add(spawn_quarry_env(worker_args, s.dir / ("worker" + std::to_string(started++) + ".log"), env));
      }
  };
  const auto collect_supervised = [&](const std::string& log) -> std::optional<int> {
    const pid_t collect = children.add(spawn_quarry_env(cat({"collect", "-o", out.string()}, opts), s.dir / log));
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < end) {
      supervise();
      if (auto rc = wait_for(collect, std::chrono::milliseconds(50))) return rc;
    }
    ::kill(collect, SIGKILL);
    wait_for(collect, std::chrono::seconds(10));
    return std::nullopt;
  };
  // The good documents first (collected: none of them is in a dying worker's hands), then the poison.
  ASSERT_EQ(run_quarry_args(cat({"submit", (s.dir / "in").string()}, opts), s.dir / "submit.log"), 0)
      << read_file(s.dir / "submit.log");
  for (int i = 0; i < 2; ++i)
    workers.push_back(children.add(spawn_quarry_env(worker_args, s.dir / ("worker" + std::to_string(started++) + ".log"), env)));
  const auto rc1 = collect_supervised("collect1.log");
  ASSERT_TRUE(rc1.has_value()) << "collect did not finish\n" << read_file(s.dir / "collect1.log");
  EXPECT_EQ(*rc1, 0) << read_file(s.dir / "collect1.log");
  ASSERT_EQ(run_quarry_args(cat({"submit", poison.string()}, opts), s.dir / "submit2.log"), 0)
      << read_file(s.dir / "submit2.log");
  const auto rc2 = collect_supervised("collect2.log");
  ASSERT_TRUE(rc2.has_value()) << "collect did not finish\n" << read_file(s.dir / "collect2.log");
  EXPECT_EQ(*rc2, 2) << read_file(s.dir / "collect2.log");  // one error record
  for (auto w : workers) {
    ::kill(w, SIGTERM);
    EXPECT_EQ(wait_for(w, std::chrono::seconds(20)), 0);
  }
  // Delivered 3 times: the first two killed their workers, the third became the error record.
  EXPECT_EQ(died_of_poison, 2);
  const auto records = read_records(out / "results.jsonl");
  ASSERT_EQ(records.size(), files.size() + 1);
  std::size_t ok = 0;
  for (const auto& r : records) {
    if (r["source"] != poison.string()) {
      EXPECT_EQ(r["status"], "ok") << r.dump();
      ok += r["status"] == "ok";
      continue;
    }
    EXPECT_EQ(r["status"], "error");
    ASSERT_EQ(r["errors"].size(), 1u);
    EXPECT_EQ(r["errors"][0]["rule"], "crash");
    EXPECT_NE(r["errors"][0]["message"].get<std::string>().find("delivered 3 times"), std::string::npos) << r.dump();
  }
  EXPECT_EQ(ok, files.size());
}

}  // namespace
