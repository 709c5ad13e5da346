#include "engine/models/tensor_parallel.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "engine/backend/collective.hpp"
#include "engine/models/registry.hpp"
#include "engine/models/safetensors.hpp"

namespace quarry::engine {

namespace {

/// One thread per rank besides the caller's (rank 0): run(fn) runs fn(r) on every rank at once and
/// returns when all are done. run(fn, tail) then runs tail(r) on the ranks r > 0 after the caller is
/// released (a decode step: the other ranks wait for their devices while the caller queues rank 0's
/// argmax behind its step, which the step's last collective keeps after theirs); quiesce() and the next
/// run() wait for the tails. A rank that throws, in fn or in a tail, aborts the collectives at once (so
/// that no other rank waits for it forever); the first exception is rethrown on the caller, by run() or,
/// for a tail, by the next quiesce() / run(). Waiting threads spin for a while before they sleep
/// (spin_us): a decode step is a few milliseconds, and a futex wake-up costs tens of microseconds of it.
class RankThreads {
 public:
  RankThreads(std::vector<std::shared_ptr<Backend>> backends, std::vector<Collective*> comms)
      : backends_(std::move(backends)), comms_(std::move(comms)), spin_us_(spin_us(*backends_[0])) {
    for (std::size_t r = 1; r < backends_.size(); ++r) workers_.emplace_back([this, r] { work(r); });
  }
  ~RankThreads() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
      generation_.fetch_add(1, std::memory_order_release);
    }
    start_.notify_all();
    for (auto& t : workers_) t.join();
  }

  void run(const std::function<void(std::size_t)>& fn, std::function<void(std::size_t)> tail = {}) {
    quiesce();
    job_ = &fn;
    tail_ = std::move(tail);
    pending_.store(workers_.size(), std::memory_order_relaxed);
    busy_.store(workers_.size(), std::memory_order_relaxed);
    {
      std::lock_guard lock(mutex_);
      generation_.fetch_add(1, std::memory_order_release);
    }
    start_.notify_all();
    backends_[0]->bind_thread();
    call(0, fn);
    wait_zero(pending_);
    job_ = nullptr;
    rethrow();
  }

  /// Waits for the tails of the last run() (the other ranks' devices idle, their threads waiting);
  /// rethrows a tail's exception.
  void quiesce() {
    wait_zero(busy_);
    rethrow();
  }

 private:
  /// Waits until `count` (pending_ or busy_) is 0: spinning, then on done_.
  void wait_zero(const std::atomic<std::size_t>& count) {
    const auto zero = [&] { return count.load(std::memory_order_acquire) == 0; };
    if (spin_until(zero)) return;
    std::unique_lock lock(mutex_);
    done_.wait(lock, zero);
  }
  /// One rank through (pending_ or busy_); the last wakes a caller sleeping in wait_zero.
  void count_down(std::atomic<std::size_t>& count) {
    if (count.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard lock(mutex_);
      done_.notify_all();
    }
  }
  void rethrow() {
    std::exception_ptr e;
    {
      std::lock_guard lock(mutex_);
      e = std::exchange(error_, nullptr);
    }
    if (e) std::rethrow_exception(e);
  }
  /// Spins until ready() holds, for at most spin_us_ microseconds; false if it did not hold by then.
  template <class F>
  bool spin_until(F ready) const {
    const auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us_);
    for (unsigned i = 1;; ++i) {
      if (ready()) return true;
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
      if (i % 64 == 0 && std::chrono::steady_clock::now() >= end) return ready();
    }
  }
  /// How long a waiting thread spins before it sleeps (QUARRY_TP_SPIN_US overrides). GPUs: 5 ms, longer
  /// than a decode step, so that neither the caller waiting for the step nor a rank waiting for the next
  /// one sleeps between steps (two H200s, Qwen3-8B at TP 2: 1.02-1.04x the tok/s of 50 us; Qwen3-0.6B
  /// 1.08x). Host backends (simulated ranks): 50 us, since a spinning thread there takes a core from the
  /// ranks' own work.
  static long spin_us(const Backend& b) {
    if (const char* e = std::getenv("QUARRY_TP_SPIN_US")) return std::max(0L, std::atol(e));
    return b.host_memory() ? 50L : 5000L;
  }
  void call(std::size_t r, const std::function<void(std::size_t)>& fn) {
    try {
      fn(r);
    } catch (...) {
      {  // the cause first: the ranks released by the abort fail with "another rank failed"
        std::lock_guard lock(mutex_);
        if (!error_) error_ = std::current_exception();
      }
      for (Collective* c : comms_)
        if (c) c->abort();
    }
  }
  void work(std::size_t r) {
    bool bound = false;
    std::size_t seen = 0;
    for (;;) {
      if (!spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; })) {
        std::unique_lock lock(mutex_);
        start_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      }
      seen = generation_.load(std::memory_order_acquire);
      if (stop_) return;
      if (!bound) {
        try {
          backends_[r]->bind_thread();
          bound = true;
        } catch (...) {
          std::lock_guard lock(mutex_);
          if (!error_) error_ = std::current_exception();
        }
      }
      if (bound) call(r, *job_);
      const bool tail = bound && tail_;  // read before the caller is released: it may run() again after
      count_down(pending_);
      if (tail) call(r, tail_);  // the next run() waits for busy_ before it sets tail_ again
      count_down(busy_);
    }
  }

  std::vector<std::shared_ptr<Backend>> backends_;
  std::vector<Collective*> comms_;
  const long spin_us_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable start_, done_;
  const std::function<void(std::size_t)>* job_ = nullptr;
  std::function<void(std::size_t)> tail_;
  std::atomic<std::size_t> pending_{0}, busy_{0}, generation_{0};
  bool stop_ = false;
  std::exception_ptr error_;
};

/// Every rank's K/V storage behind the one KvCache the runtime keeps (same block ids on every rank).
class RankedKvStorage final : public KvStorage {
 public:
  /// quiesce: waits for the ranks' devices (RankThreads::quiesce) before the caller's thread works on them.
  RankedKvStorage(const KvSpec& spec, std::vector<std::shared_ptr<Backend>> backends,
                  std::vector<std::unique_ptr<KvStorage>> ranks, std::function<void()> quiesce)
      : KvStorage(spec), backends_(std::move(backends)), ranks_(std::move(ranks)), quiesce_(std::move(quiesce)) {}
  void ensure_blocks(std::size_t n) override {
    quiesce_();
    for (std::size_t r = ranks_.size(); r-- > 0;) {  // rank 0 last: the caller's thread stays bound to it
      backends_[r]->bind_thread();
      ranks_[r]->ensure_blocks(n);
    }
  }
  // Each rank keeps the recurrent state of its own heads, in the same slots.
  void ensure_state_slots(std::size_t n) override {
    quiesce_();
    for (std::size_t r = ranks_.size(); r-- > 0;) {
      backends_[r]->bind_thread();
      ranks_[r]->ensure_state_slots(n);
    }
  }
  float* recurrent_state(std::size_t slot) const override { return ranks_[0]->recurrent_state(slot); }
  void copy_recurrent_state(std::size_t to, std::size_t from) override {
    quiesce_();
    for (std::size_t r = ranks_.size(); r-- > 0;) {
      backends_[r]->bind_thread();
      ranks_[r]->copy_recurrent_state(to, from);
    }
  }
  KvStorage& rank(std::size_t r) { return *ranks_[r]; }

 private:
  std::vector<std::shared_ptr<Backend>> backends_;
  std::vector<std::unique_ptr<KvStorage>> ranks_;
  std::function<void()> quiesce_;
};

/// The recordings of one step, one per rank.
class RankRecordings final : public CapturedOps {
 public:
  std::vector<std::unique_ptr<CapturedOps>> ranks;
};

class TensorParallelModel final : public Model {
 public:
  TensorParallelModel(const std::filesystem::path& dir, const ModelConfig& config, const Architecture& arch,
                      std::vector<std::shared_ptr<Backend>> backends, Compute compute)
      : backends_(std::move(backends)) {
    const std::size_t N = backends_.size();
    collectives_ = make_collectives(backends_);
    std::vector<Collective*> comms;
    for (const auto& c : collectives_) comms.push_back(c.get());
    threads_ = std::make_unique<RankThreads>(backends_, comms);
    ranks_.resize(N);
    threads_->run([&](std::size_t r) {  // each rank loads its slices on its own device
      ranks_[r] = arch.make_rank(config, TensorStore::open(dir), backends_[r], compute, TensorParallel{r, N, comms[r]});
    });
    hidden_in_.resize(N);
    hidden_out_.resize(N);
  }

  const ModelConfig& config() const override { return ranks_[0]->config(); }
  Backend& backend() const override { return ranks_[0]->backend(); }
  Compute compute() const override { return ranks_[0]->compute(); }
  KvSpec kv_spec() const override { return ranks_[0]->kv_spec(); }
  std::size_t mtp_depths() const override { return ranks_[0]->mtp_depths(); }
  /// Bytes of weights one decode step reads over all ranks.
  std::size_t weight_bytes_per_step() const override {
    std::size_t n = 0;
    for (const auto& m : ranks_) n += m->weight_bytes_per_step();
    return n;
  }
  std::size_t mtp_weight_bytes_per_step() const override {
    std::size_t n = 0;
    for (const auto& m : ranks_) n += m->mtp_weight_bytes_per_step();
    return n;
  }
  bool supports_capture(std::size_t n_tokens) const override {
    return std::all_of(ranks_.begin(), ranks_.end(), [&](const auto& m) { return m->supports_capture(n_tokens); });
  }
  bool can_record() const override {
    return std::all_of(backends_.begin(), backends_.end(), [](const auto& b) { return b->supports_capture(); });
  }
  void begin_capture() override {
    capturing_ = true;
    recording_ = std::make_unique<RankRecordings>();
    recording_->ranks.resize(ranks_.size());
  }
  std::unique_ptr<CapturedOps> end_capture() override {
    capturing_ = false;
    return std::move(recording_);
  }
  bool stages_batches() const override { return true; }
  bool replay(const CapturedOps& ops, const ForwardBatch& batch) override {
    const auto& rec = static_cast<const RankRecordings&>(ops);
    for (std::size_t r = 0; r < ranks_.size(); ++r)  // all or none: a rank alone would wait in its collectives
      if (!rec.ranks[r] || !backends_[r]->replayable(*rec.ranks[r])) return false;
    threads_->run(
        [&](std::size_t r) {
          const ForwardBatch own(batch, *backends_[r]);  // every rank stages at once (stages_batches)
          backends_[r]->replay(*rec.ranks[r]);
        },
        synchronize_);
    return true;
  }

  std::unique_ptr<KvStorage> make_kv_storage(const KvSpec& spec, std::size_t max_blocks) const override {
    std::vector<std::unique_ptr<KvStorage>> ranks(backends_.size());
    for (std::size_t r = backends_.size(); r-- > 0;) {
      backends_[r]->bind_thread();
      ranks[r] = backends_[r]->make_kv_storage(spec, max_blocks);
    }
    return std::make_unique<RankedKvStorage>(spec, backends_, std::move(ranks), [this] { threads_->quiesce(); });
  }

  using Model::forward;
  using Model::mtp_forward;

  bool forward(const ForwardBatch& b, KvCache& kv, const ForwardOutputs& out,
               std::span<const std::uint32_t>) override {
    RankedKvStorage& st = ranked(kv);
    const bool want_logits = out.logits != nullptr;
    // Ranks > 0 wait for their devices after the caller is released (the tail): rank 0's outputs come
    // after the step's last collective, so after every rank's part of the step.
    threads_->run(
        [&](std::size_t r) {
          const ForwardBatch own(b, *backends_[r]);  // staged before a recording begins
          record(r, [&] { ranks_[r]->forward_rank(own, st.rank(r), r == 0 ? out : ForwardOutputs{}, want_logits, {}); });
        },
        capturing_ ? std::function<void(std::size_t)>{} : synchronize_);
    return false;
  }

  void mtp_forward(std::size_t depth, const ForwardBatch& b, const float* hidden_in, KvCache& kv,
                   const ForwardOutputs& out, std::size_t draft_vocab,
                   std::span<const std::vector<std::int32_t>> candidates) override {
    RankedKvStorage& st = ranked(kv);
    const bool want_logits = out.logits != nullptr;
    const std::size_t T = b.size(), H = config().hidden_size;
    // The other ranks read the input hidden states from their own memory.
    const bool host = backends_[0]->host_memory();
    if (!host && T > 0) {
      host_hidden_.resize(T * H);
      backends_[0]->download(host_hidden_.data(), hidden_in, T * H * sizeof(float));
    }
    threads_->run([&](std::size_t r) {
      if (r == 0)
        return ranks_[0]->mtp_forward_rank(depth, b, hidden_in, st.rank(0), out, want_logits, draft_vocab, candidates);
      Backend& be = *backends_[r];
      const ForwardBatch own(b, be);
      grow(be, hidden_out_[r], T * H);
      const float* in = hidden_in;
      if (!host) {
        grow(be, hidden_in_[r], T * H);
        be.upload(hidden_in_[r].data(), host_hidden_.data(), T * H * sizeof(float));
        in = hidden_in_[r].as<float>();
      }
      ranks_[r]->mtp_forward_rank(depth, own, in, st.rank(r), {nullptr, hidden_out_[r].as<float>()}, want_logits,
                                  draft_vocab, candidates);
      be.synchronize();
    });
  }

 private:
  static RankedKvStorage& ranked(KvCache& kv) {
    auto* st = dynamic_cast<RankedKvStorage*>(&kv.storage());
    if (!st) throw std::logic_error("tensor parallel: a KV cache not made by this model (Model::make_kv_storage)");
    return *st;
  }
  static void grow(Backend& be, DeviceBuffer& buf, std::size_t floats) {
    if (buf.bytes() < std::max<std::size_t>(floats, 1) * sizeof(float)) {
      buf = DeviceBuffer();
      buf = be.alloc(std::max<std::size_t>(floats, 1) * sizeof(float) * 2);
    }
  }
  /// Runs rank r's ops, recorded on its backend while a recording is under way.
  void record(std::size_t r, const std::function<void()>& ops) {
    if (!capturing_) return ops();
    Backend& be = *backends_[r];
    be.begin_capture();
    try {
      ops();
    } catch (...) {
      be.end_capture();
      throw;
    }
    recording_->ranks[r] = be.end_capture();
  }

  std::vector<std::shared_ptr<Backend>> backends_;
  std::vector<std::unique_ptr<Collective>> collectives_;
  std::vector<std::unique_ptr<RankModel>> ranks_;
  std::unique_ptr<RankThreads> threads_;
  const std::function<void(std::size_t)> synchronize_ = [this](std::size_t r) { backends_[r]->synchronize(); };
  std::vector<DeviceBuffer> hidden_in_, hidden_out_;  ///< ranks > 0: MTP hidden states in their memory
  std::vector<float> host_hidden_;
  bool capturing_ = false;
  std::unique_ptr<RankRecordings> recording_;
};

}  // namespace

std::unique_ptr<Model> load_model_parallel(const std::filesystem::path& dir,
                                           std::vector<std::shared_ptr<Backend>> backends, Compute compute) {
  if (backends.empty()) throw std::invalid_argument("load_model_parallel: no backends");
  if (backends.size() == 1) return load_model(dir, backends[0], compute);
  const auto config_path = dir / "config.json";
  const ModelConfig config = load_model_config(config_path);
  const Architecture* arch = find_architecture(config);
  if (!arch)
    throw std::runtime_error(config_path.string() + ": unsupported architecture \"" +
                             (config.architecture.empty() ? config.model_type : config.architecture) +
                             "\" (supported: " + supported_architectures() + ")");
  if (!arch->make_rank)
    throw std::runtime_error(config_path.string() + ": " + arch->name +
                             " has no tensor-parallel form yet; run it with tensor parallel 1");
  try {
    (void)shard_dims(config, 0, backends.size());
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(config_path.string() + ": " + e.what());
  }
  auto model = std::make_unique<TensorParallelModel>(dir, config, *arch, std::move(backends), compute);
  model->backend().bind_thread();
  return model;
}

}  // namespace quarry::engine
