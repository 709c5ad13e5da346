// engine: keeps up to max_inflight requests in flight in the engine worker's continuous batch;
// retries (older documents) are admitted before new tasks; results go to validate.
#include <optional>

#include "pipeline/run/engine_worker.hpp"
#include "pipeline/run/stages.hpp"

namespace quarry::run::stages {

void engine_stage(Shared& sh, zmq::socket_t tasks_in, zmq::socket_t retry_in, zmq::context_t& zctx,
                  EngineWorker& worker) {
  auto to_validate = make_socket(zctx, zmq::socket_type::push, 8);
  to_validate.connect(ep_validate);
  auto to_writer = make_socket(zctx, zmq::socket_type::push, 16);
  to_writer.connect(ep_write);
  const std::size_t max_inflight = sh.job.engine.max_inflight;
  const NoticeMsg cancelled{NoticeMsg::Kind::cancelled, 1, std::nullopt};
  for (;;) {
    // Admit: block only while nothing is in flight; retries first (they are older documents).
    while (worker.in_flight() < max_inflight) {
      const bool idle = worker.in_flight() == 0;
      zmq::pollitem_t items[] = {{static_cast<void*>(retry_in), 0, ZMQ_POLLIN, 0},
                                 {static_cast<void*>(tasks_in), 0, ZMQ_POLLIN, 0}};
      zmq::poll(items, 2, std::chrono::milliseconds(idle ? 100 : 0));
      std::optional<Message> m;
      if (items[0].revents & ZMQ_POLLIN) m = recv(retry_in, zmq::recv_flags::dontwait);
      else if (items[1].revents & ZMQ_POLLIN) m = recv(tasks_in, zmq::recv_flags::dontwait);
      if (!m) {
        if (idle) continue;  // keep waiting for work
        break;
      }
      auto* task = std::get_if<ModelTaskMsg>(&*m);
      if (!task) throw std::runtime_error("engine: unexpected message");
      if (sh.stop() >= 1) {  // stopping: no new request starts (those in flight get the grace period)
        send(to_writer, cancelled);
        continue;
      }
      worker.submit(std::move(*task));
    }
    if (sh.stop() >= 2) {
      for (std::size_t n = worker.cancel_all(); n > 0; --n) send(to_writer, cancelled);
      continue;
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto finished = worker.step();
    sh.engine_clock.add(seconds_since(t0));
    for (auto& f : finished) send(to_validate, f);
  }
}

}  // namespace quarry::run::stages
