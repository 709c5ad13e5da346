#include "pipeline/queue/nats_client.hpp"

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <random>

namespace quarry::queue {

namespace {

constexpr std::int64_t k_ns_per_s = 1000000000;

std::int64_t to_ns(double s) { return static_cast<std::int64_t>(s * 1e9); }

/// Exponential backoff between reconnect attempts: 250 ms doubling to 8 s, with up to 25% jitter so
/// that many workers do not reconnect in step.
std::int64_t backoff_ms(natsConnection*, int attempts, void*) {
  const int shift = std::clamp(attempts - 1, 0, 5);
  const std::int64_t base = std::int64_t{250} << shift;
  thread_local std::minstd_rand rng(std::random_device{}());
  return base + static_cast<std::int64_t>(rng() % static_cast<unsigned>(base / 4 + 1));
}

void check(natsStatus s, const std::string& what) {
  if (s != NATS_OK) throw QueueError(what + ": " + status_text(s));
}

}  // namespace

std::string status_text(natsStatus s, jsErrCode js_error) {
  std::string text = natsStatus_GetText(s);
  if (js_error != 0) text += " (JetStream error " + std::to_string(static_cast<int>(js_error)) + ")";
  natsStatus last = NATS_OK;
  if (const char* detail = nats_GetLastError(&last); detail && *detail && std::string(detail) != text)
    text += ": " + std::string(detail);
  return text;
}

JobNames job_names(const std::string& job) {
  if (job.empty()) throw std::invalid_argument("no job name given (--job NAME, or `job` in the job file's [queue])");
  if (job.size() > 64) throw std::invalid_argument("job name \"" + job + "\" is longer than 64 characters");
  if (job.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != std::string::npos)
    throw std::invalid_argument("job name \"" + job + "\": only letters, digits, '_' and '-' are allowed");
  JobNames n;
  n.tasks_stream = "QUARRY_" + job + "_TASKS";
  n.results_stream = "QUARRY_" + job + "_RESULTS";
  n.tasks_subject = "quarry." + job + ".tasks";
  n.results_subject = "quarry." + job + ".results";
  n.submitted_subject = "quarry." + job + ".submitted";
  n.workers_consumer = "workers";
  n.collect_consumer = "collect";
  return n;
}

Connection::Connection(const run::QueueSettings& q, const std::string& client_name, Reconnect mode) : url_(q.url) {
  if (url_.empty()) throw std::invalid_argument("no NATS server given (--queue nats://HOST:4222, or `url` in [queue])");
  for (const auto* f : {&q.creds, &q.tls_ca, &q.tls_cert, &q.tls_key})
    if (!f->empty() && !std::filesystem::is_regular_file(*f)) throw std::invalid_argument(*f + ": file not found");
  if (q.tls_cert.empty() != q.tls_key.empty())
    throw std::invalid_argument("a TLS client certificate needs its key and the key its certificate (--tls-cert and --tls-key)");
  check(natsOptions_Create(&opts_), "NATS options");
  const auto set = [&](natsStatus s, const char* what) {
    if (s != NATS_OK) {
      const auto why = status_text(s);
      natsOptions_Destroy(opts_);
      opts_ = nullptr;
      throw QueueError(std::string("NATS option ") + what + ": " + why);
    }
  };
  set(natsOptions_SetURL(opts_, url_.c_str()), "url");
  set(natsOptions_SetName(opts_, client_name.c_str()), "name");
  set(natsOptions_SetTimeout(opts_, 5000), "timeout");
  if (!q.creds.empty()) set(natsOptions_SetUserCredentialsFromFiles(opts_, q.creds.c_str(), nullptr), "creds");
  if (!q.user.empty()) set(natsOptions_SetUserInfo(opts_, q.user.c_str(), q.password.c_str()), "user");
  if (!q.token.empty()) set(natsOptions_SetToken(opts_, q.token.c_str()), "token");
  const bool tls = q.tls || url_.rfind("tls://", 0) == 0 || !q.tls_ca.empty() || !q.tls_cert.empty();
  if (tls) {
    set(natsOptions_SetSecure(opts_, true), "tls");
    if (!q.tls_ca.empty()) set(natsOptions_LoadCATrustedCertificates(opts_, q.tls_ca.c_str()), "tls_ca");
    if (!q.tls_cert.empty())
      set(natsOptions_LoadCertificatesChain(opts_, q.tls_cert.c_str(), q.tls_key.c_str()), "tls_cert/tls_key");
  }
  set(natsOptions_SetAllowReconnect(opts_, true), "reconnect");
  // bounded: about reconnect_s of attempts (the backoff reaches 8 s after 6 attempts); forever: no limit.
  int attempts = -1;
  if (mode == Reconnect::bounded) attempts = std::max(1, static_cast<int>(6 + (std::max(0.0, q.reconnect_s - 16) / 8)));
  set(natsOptions_SetMaxReconnect(opts_, attempts), "max reconnect");
  set(natsOptions_SetCustomReconnectDelay(opts_, backoff_ms, nullptr), "reconnect delay");
  set(natsOptions_SetReconnectBufSize(opts_, 64 * 1024 * 1024), "reconnect buffer");
  const natsStatus s = natsConnection_Connect(&nc_, opts_);
  if (s != NATS_OK) {
    const auto why = status_text(s);
    natsOptions_Destroy(opts_);
    opts_ = nullptr;
    throw QueueError("cannot connect to the NATS server at " + url_ + ": " + why);
  }
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.Wait = 5000;
  if (const natsStatus j = natsConnection_JetStream(&js_, nc_, &jo); j != NATS_OK) {
    const auto why = status_text(j);
    natsConnection_Destroy(nc_);
    natsOptions_Destroy(opts_);
    throw QueueError("NATS server at " + url_ + ": JetStream context: " + why);
  }
}

Connection::~Connection() {
  if (js_) jsCtx_Destroy(js_);
  if (nc_) {
    natsConnection_Close(nc_);
    natsConnection_Destroy(nc_);
  }
  if (opts_) natsOptions_Destroy(opts_);
}

bool Connection::connected() const { return natsConnection_Status(nc_) == NATS_CONN_STATUS_CONNECTED; }
bool Connection::closed() const { return natsConnection_Status(nc_) == NATS_CONN_STATUS_CLOSED; }
std::int64_t Connection::max_payload() const { return natsConnection_GetMaxPayload(nc_); }

JobAssets ensure_job(Connection& c, const run::QueueSettings& q, const JobNames& names) {
  const auto ensure_stream = [&](const std::string& name, std::vector<const char*> subjects, jsRetentionPolicy retention) {
    jsStreamInfo* si = nullptr;
    jsErrCode jerr = static_cast<jsErrCode>(0);
    natsStatus s = js_GetStreamInfo(&si, c.js(), name.c_str(), nullptr, &jerr);
    if (s == NATS_OK) {
      jsStreamInfo_Destroy(si);
      return;
    }
    if (s != NATS_NOT_FOUND)
      throw QueueError("stream " + name + " on " + c.url() + ": " + status_text(s, jerr) +
                       (jerr == 0 && s == NATS_NO_RESPONDERS ? " (is the server started with -js?)" : ""));
    jsStreamConfig cfg;
    jsStreamConfig_Init(&cfg);
    cfg.Name = name.c_str();
    cfg.Subjects = subjects.data();
    cfg.SubjectsLen = static_cast<int>(subjects.size());
    cfg.Retention = retention;
    cfg.Storage = js_FileStorage;
    cfg.Duplicates = to_ns(q.dedupe_window_s);
    s = js_AddStream(&si, c.js(), &cfg, nullptr, &jerr);
    // Another role may have created it meanwhile: that one is used.
    if (s != NATS_OK && jerr != JSStreamNameExistErr)
      throw QueueError("cannot create stream " + name + " on " + c.url() + ": " + status_text(s, jerr) +
                       (s == NATS_NO_RESPONDERS ? " (is the server started with -js?)" : ""));
    if (si) jsStreamInfo_Destroy(si);
  };
  ensure_stream(names.tasks_stream, {names.tasks_subject.c_str()}, js_WorkQueuePolicy);
  ensure_stream(names.results_stream, {names.results_subject.c_str(), names.submitted_subject.c_str()},
                js_LimitsPolicy);

  jsConsumerInfo* ci = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  natsStatus s = js_GetConsumerInfo(&ci, c.js(), names.tasks_stream.c_str(), names.workers_consumer.c_str(), nullptr, &jerr);
  if (s == NATS_NOT_FOUND) {
    jsConsumerConfig cc;
    jsConsumerConfig_Init(&cc);
    cc.Durable = names.workers_consumer.c_str();
    cc.AckPolicy = js_AckExplicit;
    cc.DeliverPolicy = js_DeliverAll;
    cc.AckWait = to_ns(q.ack_wait_s);
    cc.MaxDeliver = static_cast<std::int64_t>(q.max_deliver);
    cc.MaxAckPending = 10000;
    s = js_AddConsumer(&ci, c.js(), names.tasks_stream.c_str(), &cc, nullptr, &jerr);
    if (s != NATS_OK && jerr == JSConsumerNameExistErr)
      s = js_GetConsumerInfo(&ci, c.js(), names.tasks_stream.c_str(), names.workers_consumer.c_str(), nullptr, &jerr);
  }
  if (s != NATS_OK)
    throw QueueError("consumer " + names.workers_consumer + " of stream " + names.tasks_stream + " on " + c.url() + ": " +
                     status_text(s, jerr));
  JobAssets a;
  a.ack_wait_s = static_cast<double>(ci->Config->AckWait) / static_cast<double>(k_ns_per_s);
  a.max_deliver = ci->Config->MaxDeliver > 0 ? static_cast<std::size_t>(ci->Config->MaxDeliver) : 0;
  jsConsumerInfo_Destroy(ci);
  if (std::abs(a.ack_wait_s - q.ack_wait_s) > 1e-3 || a.max_deliver != q.max_deliver)
    a.differs = "the job's consumer was created with ack wait " + std::to_string(static_cast<int>(a.ack_wait_s)) +
                " s and max deliveries " + std::to_string(a.max_deliver) + "; this role's " +
                std::to_string(static_cast<int>(q.ack_wait_s)) + " s and " + std::to_string(q.max_deliver) +
                " do not change it (give them to the role that starts the job, usually submit)";
  return a;
}

std::pair<std::uint64_t, std::uint64_t> tasks_state(Connection& c, const JobNames& names) {
  jsStreamInfo* si = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  const natsStatus s = js_GetStreamInfo(&si, c.js(), names.tasks_stream.c_str(), nullptr, &jerr);
  if (s != NATS_OK) throw QueueError("stream " + names.tasks_stream + " on " + c.url() + ": " + status_text(s, jerr));
  const std::pair<std::uint64_t, std::uint64_t> r{si->State.LastSeq, si->State.Msgs};
  jsStreamInfo_Destroy(si);
  return r;
}

Published publish(Connection& c, const std::string& subject, const std::string& msg_id,
                  const std::vector<std::pair<std::string, std::string>>& headers, const void* data, std::size_t size,
                  double timeout_s) {
  natsMsg* raw = nullptr;
  natsStatus s = natsMsg_Create(&raw, subject.c_str(), nullptr, static_cast<const char*>(data), static_cast<int>(size));
  if (s != NATS_OK) throw QueueError("message to " + subject + ": " + status_text(s));
  MsgPtr m(raw);
  for (const auto& [k, v] : headers) {
    s = natsMsgHeader_Set(m.get(), k.c_str(), v.c_str());
    if (s != NATS_OK) throw QueueError("header " + k + " of a message to " + subject + ": " + status_text(s));
  }
  jsPubOptions po;
  jsPubOptions_Init(&po);
  po.MsgId = msg_id.c_str();
  po.MaxWait = static_cast<std::int64_t>(timeout_s * 1000);
  jsPubAck* ack = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  s = js_PublishMsg(&ack, c.js(), m.get(), &po, &jerr);
  if (s != NATS_OK) throw QueueError("publish to " + subject + " on " + c.url() + ": " + status_text(s, jerr));
  Published p;
  p.sequence = ack->Sequence;
  p.duplicate = ack->Duplicate;
  jsPubAck_Destroy(ack);
  return p;
}

std::string header(natsMsg* m, const char* key) {
  const char* v = nullptr;
  if (natsMsgHeader_Get(m, key, &v) != NATS_OK || !v) return {};
  return v;
}

Delivery delivery_of(natsMsg* m) {
  jsMsgMetaData* meta = nullptr;
  const natsStatus s = natsMsg_GetMetaData(&meta, m);
  if (s != NATS_OK) throw QueueError("a message without JetStream metadata: " + status_text(s));
  Delivery d{meta->Sequence.Stream, meta->NumDelivered};
  jsMsgMetaData_Destroy(meta);
  return d;
}

}  // namespace quarry::queue
