#include "engine/models/model.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "engine/models/registry.hpp"
#include "engine/models/safetensors.hpp"

namespace quarry::engine {

ForwardBatch::ForwardBatch(Backend& backend, const Batch& b, const KvCache& kv, std::size_t vocab_size, bool stage_now) {
  const std::size_t T = b.size();
  // The batch's sequences in order of first appearance, each with its block table.
  std::vector<SeqId> seqs;
  std::vector<std::int32_t> seq_index(T), logit_rows;
  std::size_t max_blocks = 0;
  for (std::size_t t = 0; t < T; ++t) {
    if (b.tokens[t] < 0 || static_cast<std::size_t>(b.tokens[t]) >= vocab_size)
      throw std::invalid_argument("forward: token id " + std::to_string(b.tokens[t]) + " outside the vocabulary (" +
                                  std::to_string(vocab_size) + ")");
    std::size_t s = 0;
    if (t > 0 && b.seq_ids[t] == b.seq_ids[t - 1]) s = static_cast<std::size_t>(seq_index[t - 1]);
    else {
      s = static_cast<std::size_t>(std::find(seqs.begin(), seqs.end(), b.seq_ids[t]) - seqs.begin());
      if (s == seqs.size()) seqs.push_back(b.seq_ids[t]);
    }
    seq_index[t] = static_cast<std::int32_t>(s);
    const auto& table = kv.block_table(b.seq_ids[t]);
    if (b.positions[t] < 0 || static_cast<std::size_t>(b.positions[t]) >= table.size() * kv.spec().block_size)
      throw std::invalid_argument("forward: position " + std::to_string(b.positions[t]) +
                                  " outside the block table of sequence " + std::to_string(b.seq_ids[t]));
    max_blocks = std::max(max_blocks, table.size());
    if (b.logits[t]) logit_rows.push_back(static_cast<std::int32_t>(t));
  }
  // The table stride rounded up to a power of two (at least 16): it changes rarely as sequences grow, so
  // that a recorded decode step (a CUDA graph) stays valid for many steps.
  std::size_t stride = 16;
  while (stride < max_blocks) stride *= 2;
  max_blocks = stride;
  std::vector<std::int32_t> tables(seqs.size() * max_blocks, -1);
  for (std::size_t s = 0; s < seqs.size(); ++s) {
    const auto& table = kv.block_table(seqs[s]);
    std::copy(table.begin(), table.end(), tables.begin() + static_cast<std::ptrdiff_t>(s * max_blocks));
  }
  if (kv.spec().state_floats > 0)
    for (const SeqId s : seqs) state_slots_.push_back(static_cast<std::int32_t>(kv.state_slot(s)));
  tokens_.assign(b.tokens.begin(), b.tokens.end());
  positions_.assign(b.positions.begin(), b.positions.end());
  seq_index_ = std::move(seq_index);
  tables_ = std::move(tables);
  logit_rows_ = std::move(logit_rows);
  max_blocks_ = max_blocks;
  n_tokens_ = tokens_.size();
  n_logits_ = logit_rows_.size();
  if (stage_now) stage(backend);
}

const StagedBatch& ForwardBatch::staged() const {
  if (!staged_) throw std::logic_error("ForwardBatch: the batch was not staged on this backend");
  return *staged_;
}

ForwardBatch::ForwardBatch(const ForwardBatch& o, Backend& backend)
    : state_slots_(o.state_slots_), tokens_(o.tokens_), positions_(o.positions_), seq_index_(o.seq_index_), tables_(o.tables_),
      logit_rows_(o.logit_rows_), max_blocks_(o.max_blocks_) {
  stage(backend);
}

void ForwardBatch::stage(Backend& backend) {
  BatchInputs in;
  in.tokens = tokens_;
  in.positions = positions_;
  in.seq_index = seq_index_;
  in.block_tables = tables_;
  in.max_blocks = max_blocks_;
  in.logit_rows = logit_rows_;
  in.state_slots = state_slots_;
  staged_ = &backend.stage(in);
  n_tokens_ = tokens_.size();
  n_logits_ = logit_rows_.size();
}

void Model::mtp_forward(std::size_t, const ForwardBatch&, const float*, KvCache&, const ForwardOutputs&, std::size_t,
                        std::span<const std::vector<std::int32_t>>) {
  throw std::invalid_argument("mtp_forward: the model has no MTP module");
}

bool Model::forward(const Batch& batch, KvCache& kv, float* logits_host, float* hidden_host,
                    std::span<const std::uint32_t> lm_head_groups) {
  Backend& be = backend();
  const ForwardBatch fb(be, batch, kv, config().vocab_size, !stages_batches());
  const std::size_t V = config().vocab_size, H = config().hidden_size;
  if (be.host_memory()) return forward(fb, kv, {logits_host, hidden_host}, lm_head_groups);
  const std::size_t nl = logits_host ? fb.n_logits() * V : 0, nh = hidden_host ? fb.size() * H : 0;
  if (host_io_floats_ < nl + nh) {
    host_io_ = DeviceBuffer();
    host_io_ = be.alloc((nl + nh) * sizeof(float));
    host_io_floats_ = nl + nh;
  }
  float* dev = host_io_.as<float>();
  const bool restricted = forward(fb, kv, {logits_host ? dev : nullptr, hidden_host ? dev + nl : nullptr}, lm_head_groups);
  if (logits_host) be.download(logits_host, dev, nl * sizeof(float));
  if (hidden_host) be.download(hidden_host, dev + nl, nh * sizeof(float));
  return restricted;
}

void Model::mtp_forward(std::size_t depth, const Batch& batch, const float* hidden_in_host, KvCache& kv,
                        float* hidden_out_host, float* logits_host, std::size_t draft_vocab,
                        std::span<const std::vector<std::int32_t>> candidates) {
  Backend& be = backend();
  const ForwardBatch fb(be, batch, kv, config().vocab_size);
  const std::size_t V = draft_vocab > 0 ? std::min(draft_vocab, config().vocab_size) : config().vocab_size;
  const std::size_t H = config().hidden_size;
  if (be.host_memory())
    return mtp_forward(depth, fb, hidden_in_host, kv, {logits_host, hidden_out_host}, draft_vocab, candidates);
  const std::size_t nl = logits_host ? fb.n_logits() * V : 0, nh = fb.size() * H;
  if (host_io_floats_ < nl + 2 * nh) {
    host_io_ = DeviceBuffer();
    host_io_ = be.alloc((nl + 2 * nh) * sizeof(float));
    host_io_floats_ = nl + 2 * nh;
  }
  float* dev = host_io_.as<float>();
  be.upload(dev + nl + nh, hidden_in_host, nh * sizeof(float));
  mtp_forward(depth, fb, dev + nl + nh, kv, {logits_host ? dev : nullptr, dev + nl}, draft_vocab, candidates);
  if (logits_host) be.download(logits_host, dev, nl * sizeof(float));
  if (hidden_out_host) be.download(hidden_out_host, dev + nl, nh * sizeof(float));
}

KvSpec Model::cache_spec(std::size_t mtp_layers) const {
  KvSpec spec = kv_spec();
  spec.n_layers = config().attention_layers() + std::min(mtp_layers, mtp_depths());
  return spec;
}

std::unique_ptr<KvCache> Model::make_kv_cache(std::size_t max_tokens, std::size_t mtp_layers,
                                              const PrefixCacheOptions& prefix) const {
  const KvSpec spec = cache_spec(mtp_layers);
  const std::size_t blocks = (max_tokens + spec.block_size - 1) / spec.block_size;
  return std::make_unique<KvCache>(spec, max_tokens, prefix, make_kv_storage(spec, blocks));
}

std::unique_ptr<Model> load_model(const std::filesystem::path& dir, std::shared_ptr<Backend> backend, Compute compute) {
  const auto config_path = dir / "config.json";
  ModelConfig config = load_model_config(config_path);
  const Architecture* arch = find_architecture(config);
  if (!arch)
    throw std::runtime_error(config_path.string() + ": unsupported architecture \"" +
                             (config.architecture.empty() ? config.model_type : config.architecture) +
                             "\" (supported: " + supported_architectures() + ")");
  return arch->make(config, TensorStore::open(dir), std::move(backend), compute);
}

std::unique_ptr<Model> load_model(const std::filesystem::path& dir, Compute compute) {
  return load_model(dir, make_backend({}), compute);
}

}  // namespace quarry::engine
