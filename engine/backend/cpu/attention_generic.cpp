// Paged attention kernel compiled for the generic instruction set (see attention_kernels.hpp).
#include "engine/backend/cpu/attention_kernels.hpp"
#include "engine/backend/cpu/attention_range.inc"

namespace quarry::engine::cpu::detail {
void attention_range_generic(const AttentionArgs& a, std::size_t w0, std::size_t w1) { attention_range_impl(a, w0, w1); }
}  // namespace quarry::engine::cpu::detail
