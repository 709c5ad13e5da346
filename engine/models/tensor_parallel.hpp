// A model split over the devices of one machine (tensor parallelism; parallel.hpp says how the weights
// split): one process, one thread per rank, each rank a model of its slices on its own backend, the
// ranks joined by collectives (NCCL on CUDA, in-process on the CPU: simulated ranks with the same split
// and the same collectives, for tests). To the runtime it is one Model: the scheduler, the grammar and
// the sampler stay on the caller's thread and see rank 0's backend; the block tables are shared and each
// rank keeps the K/V of its heads in its own storage.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "engine/backend/backend.hpp"
#include "engine/models/model.hpp"
#include "engine/models/parallel.hpp"

namespace quarry::engine {

/// One rank's model: Model's forward calls over the rank's own KV storage. Every rank of a group is
/// called with the same batch (staged on its backend) and the same output requests (want_logits),
/// since each takes part in the collectives; only rank 0 writes `out` (logits, hidden states).
class RankModel : public Model {
 public:
  virtual bool forward_rank(const ForwardBatch& batch, KvStorage& kv, const ForwardOutputs& out, bool want_logits,
                            std::span<const std::uint32_t> lm_head_groups) = 0;
  virtual void mtp_forward_rank(std::size_t depth, const ForwardBatch& batch, const float* hidden_in, KvStorage& kv,
                                const ForwardOutputs& out, bool want_logits, std::size_t draft_vocab,
                                std::span<const std::vector<std::int32_t>> candidates) = 0;
};

/// Loads the model in `dir` split over `backends` (rank r on backends[r]; one backend: load_model).
/// Throws std::runtime_error naming the checkpoint when its architecture has no tensor-parallel form
/// or its shape does not split over that many ranks (shard_dims), or as load_model.
std::unique_ptr<Model> load_model_parallel(const std::filesystem::path& dir,
                                           std::vector<std::shared_ptr<Backend>> backends,
                                           Compute compute = Compute::automatic);

}  // namespace quarry::engine
