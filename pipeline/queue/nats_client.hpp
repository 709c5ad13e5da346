// A thin RAII layer over the NATS C client (Debian's libnats-dev, nats.c 3.4): one connection with the
// JetStream context, the job's streams and consumer, publishing with a message id, and the status
// texts. Everything the queue roles (queue.hpp) need of NATS, and nothing else.
//
// Connection options are those the C client supports (natsOptions_*): the server URL(s), a
// credentials file (natsOptions_SetUserCredentialsFromFiles: JWT + NKey seed), user and password,
// a token, TLS (natsOptions_SetSecure, a CA file for the server's certificate, a client certificate
// and key for mutual TLS). Reconnection is the client's own (it resubscribes and replays what was
// buffered), with a backoff of 250 ms doubling to 8 s between attempts and a random jitter;
// Reconnect::bounded gives up after QueueSettings::reconnect_s, Reconnect::forever never does.
#pragma once

#include <nats/nats.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "pipeline/run/job.hpp"

namespace quarry::queue {

/// A failure of the queue (server unreachable, a JetStream request refused). The message names the
/// server URL or the stream and gives the client's reason.
class QueueError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The client's text for `s` ("Connection Refused", "Timeout", ...), with the JetStream error code and
/// the client's last error detail when there is one.
std::string status_text(natsStatus s, jsErrCode js_error = static_cast<jsErrCode>(0));

/// The names of a job's JetStream assets, derived from QueueSettings::job.
struct JobNames {
  std::string tasks_stream;       ///< QUARRY_<job>_TASKS: work-queue retention, one message per document
  std::string results_stream;     ///< QUARRY_<job>_RESULTS: limits retention, records and submit summaries
  std::string tasks_subject;      ///< quarry.<job>.tasks
  std::string results_subject;    ///< quarry.<job>.results
  std::string submitted_subject;  ///< quarry.<job>.submitted (one summary per finished submit)
  std::string workers_consumer;   ///< "workers": the durable pull consumer every worker binds to
  std::string collect_consumer;   ///< "collect": the collector's durable pull consumer on the results
};

/// Throws std::invalid_argument when `job` is empty, longer than 64 characters or has a character
/// other than [A-Za-z0-9_-] (NATS stream names and subject tokens must not hold '.', '*', '>' or blanks).
JobNames job_names(const std::string& job);

/// Owns a natsMsg.
struct MsgDeleter {
  void operator()(natsMsg* m) const { natsMsg_Destroy(m); }
};
using MsgPtr = std::unique_ptr<natsMsg, MsgDeleter>;

/// One connection to the NATS server and its JetStream context.
class Connection {
 public:
  enum class Reconnect { bounded, forever };

  /// Connects (one attempt, within 5 s). Throws QueueError "cannot connect to the NATS server at URL:
  /// REASON" when the server is down or refuses (authentication, TLS), std::invalid_argument for an
  /// empty URL or a TLS file that cannot be read.
  Connection(const run::QueueSettings& q, const std::string& client_name, Reconnect mode);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  natsConnection* nc() const { return nc_; }
  jsCtx* js() const { return js_; }
  const std::string& url() const { return url_; }
  /// The connection is up (not disconnected, reconnecting or closed).
  bool connected() const;
  /// The client gave up reconnecting (Reconnect::bounded after reconnect_s): nothing will work again.
  bool closed() const;
  /// The server's largest message payload, bytes.
  std::int64_t max_payload() const;

 private:
  std::string url_;
  natsOptions* opts_ = nullptr;
  natsConnection* nc_ = nullptr;
  jsCtx* js_ = nullptr;
};

/// The settings the job's assets were made with (the consumer's, read back from the server).
struct JobAssets {
  double ack_wait_s = 0;
  std::size_t max_deliver = 0;
  std::string differs;  ///< non-empty: these differ from the QueueSettings given (the message says how)
};

/// Creates the job's two streams (file storage, duplicate window QueueSettings::dedupe_window_s) and the
/// workers' durable pull consumer (explicit ack, AckWait, MaxDeliver, deliver all) when they do not exist;
/// existing ones are used as they are. Returns the consumer's settings. Throws QueueError naming the
/// stream or consumer when JetStream refuses (JetStream not enabled on the server: "is the server
/// started with -js?").
JobAssets ensure_job(Connection& c, const run::QueueSettings& q, const JobNames& names);

/// The tasks stream's last sequence number (every task ever stored gets the next one) and its
/// messages still stored (work-queue retention: tasks not acked yet). Throws QueueError.
std::pair<std::uint64_t, std::uint64_t> tasks_state(Connection& c, const JobNames& names);

/// Publishes one message to JetStream and waits for the stream's acknowledgement (the message is then
/// stored). `msg_id`: the Nats-Msg-Id de-duplication id. Returns the stream sequence and whether the
/// server recognised a duplicate (then nothing new was stored). Throws QueueError with the reason.
struct Published {
  std::uint64_t sequence = 0;
  bool duplicate = false;
};
Published publish(Connection& c, const std::string& subject, const std::string& msg_id,
                  const std::vector<std::pair<std::string, std::string>>& headers, const void* data, std::size_t size,
                  double timeout_s = 5);

/// A header of a message; empty when it has none.
std::string header(natsMsg* m, const char* key);

/// The JetStream metadata of a delivered message: its stream sequence and delivery count (1 on the
/// first delivery). Throws QueueError for a message that did not come from JetStream.
struct Delivery {
  std::uint64_t stream_sequence = 0;
  std::uint64_t delivered = 0;
};
Delivery delivery_of(natsMsg* m);

}  // namespace quarry::queue
