#include <stdexcept>
#include <string>

#include "engine/core/constraint.hpp"
#include "engine/core/types.hpp"

namespace quarry::engine {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
  }
  return "?";
}

void check_sampling(float temperature, float top_p, float min_p, std::string_view who) {
  const std::string w(who);
  if (!(temperature >= 0.f)) throw std::invalid_argument(w + ": temperature must be >= 0");
  if (!(top_p > 0.f && top_p <= 1.f)) throw std::invalid_argument(w + ": top_p must be in (0, 1]");
  if (!(min_p >= 0.f && min_p <= 1.f)) throw std::invalid_argument(w + ": min_p must be in [0, 1]");
}

const char* compute_name(Compute c) {
  switch (c) {
    case Compute::automatic: return "auto";
    case Compute::exact: return "exact";
    case Compute::bf16: return "bf16";
  }
  return "auto";
}

Compute parse_compute(std::string_view name) {
  if (name == "auto") return Compute::automatic;
  if (name == "exact") return Compute::exact;
  if (name == "bf16") return Compute::bf16;
  throw std::invalid_argument("unknown compute mode \"" + std::string(name) + "\" (auto, exact, bf16)");
}

void TokenConstraint::rollback(std::size_t) {
  throw std::logic_error("TokenConstraint: this constraint does not support rollback");
}

}  // namespace quarry::engine
