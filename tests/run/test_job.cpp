// TOML job files (pipeline/run/job.hpp).
#include <gtest/gtest.h>

#include <fstream>

#include "pipeline/run/job.hpp"
#include "tests/run/run_support.hpp"

namespace {

using quarry::run::load_job_file;
using quarry::test_run::Scratch;

std::filesystem::path write(const Scratch& s, const std::string& name, const std::string& text) {
  const auto p = s.dir / name;
  std::ofstream(p) << text;
  return p;
}

TEST(JobFile, ReadsEveryKeyAndResolvesPathsAgainstItsFolder) {
  Scratch s("job");
  const auto p = write(s, "job.toml", R"(
inputs = ["invoices", "more/*.pdf"]
task = "kie"
schema = "my.schema.json"
model = "/models/m"
output = "out"
prefer = "model"
retries = 3
[engine]
threads = 2
max_tokens = 512
max_inflight = 8
mtp_depth = 2
temperature = 0.0
retry_temperature = 0.5
seed = 7
grounding = "off"
state_snapshot_tokens = 2048
max_state_snapshots = 8
[extract]
threads = 3
)");
  const auto job = load_job_file(p);
  ASSERT_EQ(job.inputs.size(), 2u);
  EXPECT_EQ(job.inputs[0], (s.dir / "invoices").string());
  EXPECT_EQ(job.inputs[1], (s.dir / "more/*.pdf").string());
  EXPECT_EQ(job.schema, s.dir / "my.schema.json");
  EXPECT_EQ(job.model, std::filesystem::path("/models/m"));
  EXPECT_EQ(job.output, s.dir / "out");
  EXPECT_EQ(job.prefer, quarry::run::Prefer::model);
  EXPECT_EQ(job.retries, 3u);
  EXPECT_EQ(job.engine.threads, 2u);
  EXPECT_EQ(job.engine.max_tokens, 512u);
  EXPECT_EQ(job.engine.max_inflight, 8u);
  EXPECT_EQ(job.engine.mtp_depth, 2u);
  EXPECT_FLOAT_EQ(job.engine.retry_temperature, 0.5f);
  EXPECT_EQ(job.engine.seed, 7u);
  EXPECT_FALSE(job.engine.grounding);
  EXPECT_EQ(job.engine.state_snapshot_tokens, 2048u);
  EXPECT_EQ(job.engine.max_state_snapshots, 8u);
  EXPECT_EQ(job.extract_threads, 3u);
}

void expect_error(const std::string& text, const std::string& needle) {
  Scratch s("joberr");
  const auto p = write(s, "bad.toml", text);
  try {
    load_job_file(p);
    FAIL() << "expected an error for: " << text;
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("bad.toml"), std::string::npos) << what;
    EXPECT_NE(what.find(needle), std::string::npos) << what;
  }
}

TEST(JobFile, ErrorsNameTheFileAndTheKey) {
  expect_error("inputs = [\"a\"\n", "bad.toml:");           // TOML syntax error with line:column
  expect_error("inputs = [\"a\"]\nfrobnicate = 1\n", "frobnicate");
  expect_error("task = \"summarise\"\n", "task");
  expect_error("retries = -1\n", "retries");
  expect_error("[engine]\nthreads = \"four\"\n", "engine.threads");
  expect_error("[engine]\nwarp = 9\n", "engine.warp");
  expect_error("prefer = \"xml\"\n", "prefer");
  expect_error("inputs = [1, 2]\n", "inputs");
  expect_error("[engine]\ngrounding = \"maybe\"\n", "engine.grounding");
}

TEST(JobFile, CrossCheckIsReadAndNeedsPreferModelAndTaskKie) {
  Scratch s("jobcross");
  std::ofstream(s.dir / "job.toml") << "inputs = [\"a\"]\noutput = \"o\"\nprefer = \"model\"\ncross_check = true\n";
  auto job = load_job_file(s.dir / "job.toml");
  EXPECT_TRUE(job.cross_check);
  EXPECT_EQ(job.prefer, quarry::run::Prefer::model);
  std::ofstream(s.dir / "job.toml") << "inputs = [\"a\"]\noutput = \"o\"\n";
  EXPECT_FALSE(load_job_file(s.dir / "job.toml").cross_check);  // the default
  expect_error("cross_check = \"yes\"\n", "cross_check");

  const auto refused = [](quarry::run::JobSpec j, const std::string& needle) {
    try {
      quarry::run::resolve_defaults(j);
      ADD_FAILURE() << "expected a refusal naming " << needle;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  quarry::run::JobSpec j;
  j.inputs = {"a"};
  j.output = "o";
  j.cross_check = true;
  refused(j, "--prefer model");  // prefer auto: the XML alone would be read
  j.prefer = quarry::run::Prefer::model;
  j.task = quarry::run::Task::rag;
  j.task_set = true;
  refused(j, "task kie");
}

TEST(JobFile, ResolveDefaultsRefusesAJobWithoutOutput) {
  quarry::run::JobSpec job;
  job.inputs = {"x"};
  EXPECT_THROW(quarry::run::resolve_defaults(job), std::runtime_error);
}

}  // namespace

namespace {

TEST(JobFit, ThreadsBeyondTheMachineAreClampedWithAWarning) {
  quarry::run::JobSpec job;
  job.extract_threads = 500;
  job.engine.threads = 64;
  const auto w = quarry::run::fit_to_machine(job, 2, 1024);
  EXPECT_EQ(job.extract_threads, 8u);  // 4 per hardware thread
  EXPECT_EQ(job.engine.threads, 2u);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_NE(w[0].find("500"), std::string::npos) << w[0];
  EXPECT_NE(w[0].find("clamped to 8"), std::string::npos) << w[0];
  EXPECT_NE(w[1].find("64"), std::string::npos) << w[1];

  // The open-file limit bounds them too: (400 - 256) / 12 = 12 threads on a 64-thread machine.
  job.extract_threads = 500;
  quarry::run::fit_to_machine(job, 64, 400);
  EXPECT_EQ(job.extract_threads, 12u);
  job.extract_threads = 500;
  quarry::run::fit_to_machine(job, 64, 100);  // below the reserve: still one
  EXPECT_EQ(job.extract_threads, 1u);

  // What the machine can do is left alone, without a word.
  job.extract_threads = 2;
  job.engine.threads = 0;
  EXPECT_TRUE(quarry::run::fit_to_machine(job, 2, 1024).empty());
  EXPECT_EQ(job.extract_threads, 2u);
  EXPECT_EQ(job.engine.threads, 0u);
}

TEST(JobFile, RetryErrorsAndExtractPdfPasswordAreRead) {
  Scratch s("jobpw");
  std::ofstream(s.dir / "job.toml") << "inputs = [\"a\"]\noutput = \"o\"\nretry_errors = true\n"
                                    << "[extract]\nthreads = 1\npdf_password = \"s3cret\"\n";
  const auto job = quarry::run::load_job_file(s.dir / "job.toml");
  EXPECT_EQ(job.extract.pdf_password, "s3cret");
  EXPECT_TRUE(job.retry_errors);
  EXPECT_TRUE(job.extract.isolation);  // the defaults
  EXPECT_EQ(job.extract.timeout_s, 30.0);
  EXPECT_EQ(job.extract.memory_mb, 1024u);
  expect_error("retry_errors = 1\n", "retry_errors");
}

TEST(JobFile, ExtractLimitsAreRead) {
  Scratch s("joblimits");
  std::ofstream(s.dir / "job.toml") << "inputs = [\"a\"]\noutput = \"o\"\n[extract]\nisolation = false\ntimeout_s = 2.5\n"
                                    << "memory_mb = 512\nmax_file_mb = 10\nmax_text_mb = 11\nmax_page_text_mb = 12\n"
                                    << "max_attachment_mb = 13\nmax_pages = 14\n";
  const auto job = quarry::run::load_job_file(s.dir / "job.toml");
  EXPECT_FALSE(job.extract.isolation);
  EXPECT_EQ(job.extract.timeout_s, 2.5);
  EXPECT_EQ(job.extract.memory_mb, 512u);
  EXPECT_EQ(job.extract.max_file_mb, 10u);
  EXPECT_EQ(job.extract.max_text_mb, 11u);
  EXPECT_EQ(job.extract.max_page_text_mb, 12u);
  EXPECT_EQ(job.extract.max_attachment_mb, 13u);
  EXPECT_EQ(job.extract.max_pages, 14u);
  expect_error("[extract]\ntimeout_s = -1\n", "extract.timeout_s");
  expect_error("[extract]\nisolation = \"yes\"\n", "extract.isolation");
}

}  // namespace
