// One request's live state from submit() until step() returns it (internal to the runtime: the
// scheduler, the structured-output manager and the engine facade share it).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/constraint.hpp"
#include "engine/core/types.hpp"
#include "engine/runtime/engine.hpp"
#include "engine/runtime/sampler.hpp"
#include "engine/runtime/speculative.hpp"

namespace quarry::engine {

struct Sequence {
  RequestId id = 0;
  GenerationRequest req;
  GenerationResult result;
  std::vector<TokenId> tokens;         ///< prompt followed by the output so far
  std::vector<BlockHash> prompt_keys;  ///< prefix-cache keys of the prompt's full blocks
  SeqId kv = -1;                       ///< KV-cache sequence; -1 while waiting and after finishing
  std::size_t n_computed = 0;          ///< leading positions whose K/V is in the cache (cache hits included)
  std::size_t reserve_tokens = 0;      ///< positions admission reserved KV blocks for
  std::size_t n_passed = 0;            ///< times a later request was admitted before this one
  Sampler sampler;
  std::shared_ptr<TokenConstraint> constraint;  ///< the request's, or one built from its json_schema
  bool done = false, cancelled = false;
  std::string error;
  double t_submit = 0.0, t_first = -1.0;
  std::size_t stop_scan_from = 0;
  // Speculative decoding (MTP drafts; engine/runtime/speculative.hpp).
  std::unique_ptr<MtpState> mtp;  ///< null: no drafting for this request
  std::size_t mtp_cap = 0;
  DraftJob job;          ///< this step's drafts
  bool drafted = false;  ///< job holds this step's draft round
  // This step's rows in the batch (set by the scheduler).
  std::size_t row_first = 0, n_rows = 0, pos_first = 0, logit_first = 0;
  bool has_logits = false;
  /// This step's bitmask of the constraint's current state when the drafter did not provide the masks
  /// (StructuredOutput::step_masks).
  std::vector<std::uint32_t> step_mask;
  bool has_step_mask = false;

  Sequence(RequestId i, GenerationRequest r) : id(i), req(std::move(r)), sampler(req.sampling) {}
  std::size_t n_prompt() const { return req.prompt.size(); }
  bool prefilling() const { return n_computed < req.prompt.size(); }
  /// Drafts of this step's verify rows.
  std::size_t n_drafts() const { return drafted ? job.drafts.size() : 0; }
};

}  // namespace quarry::engine
