#include "engine/backend/backend.hpp"

#include <charconv>
#include <stdexcept>
#include <string>

#include "engine/backend/cpu/cpu_backend.hpp"
#ifdef QUARRY_HAVE_CUDA
#include "engine/backend/cuda/cuda_backend.hpp"
#endif

namespace quarry::engine {

DeviceSpec parse_device(std::string_view text) {
  DeviceSpec d;
  if (text == "cpu") return d;
  if (text == "auto") {
    if (cuda_device_count() > 0) d.kind = DeviceSpec::Kind::cuda;
    return d;
  }
  if (text == "cuda") {
    d.kind = DeviceSpec::Kind::cuda;
    return d;
  }
  if (text.starts_with("cuda:")) {
    const std::string_view n = text.substr(5);
    int index = -1;
    const auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), index);
    if (ec == std::errc() && end == n.data() + n.size() && index >= 0) {
      d.kind = DeviceSpec::Kind::cuda;
      d.index = index;
      return d;
    }
  }
  throw std::invalid_argument("unknown device \"" + std::string(text) + "\" (cpu, cuda, cuda:N, auto)");
}

std::string device_name(const DeviceSpec& d) {
  return d.kind == DeviceSpec::Kind::cpu ? std::string("cpu") : "cuda:" + std::to_string(d.index);
}

bool cuda_backend_built() {
#ifdef QUARRY_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#ifdef QUARRY_HAVE_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

std::shared_ptr<Backend> make_backend(const BackendOptions& options) {
  if (options.device.kind == DeviceSpec::Kind::cpu) return cpu::make_cpu_backend(options.n_threads);
#ifdef QUARRY_HAVE_CUDA
  return cuda::make_cuda_backend(options.device.index);
#else
  throw std::runtime_error("device " + device_name(options.device) +
                           ": this build of quarry has no CUDA backend (configure with -DQUARRY_CUDA=ON where the "
                           "CUDA toolkit is installed)");
#endif
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ && owner_) owner_->free(data_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (data_ && owner_) owner_->free(data_);
    owner_ = std::move(o.owner_);
    data_ = o.data_;
    bytes_ = o.bytes_;
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

void Backend::matmul_many(const float* x, std::size_t m, std::size_t ldx, std::span<const MatmulOut> outs) {
  for (const auto& o : outs) matmul(x, m, ldx, *o.w, o.w->rows, o.y, o.ldy);
}

void Backend::matmul_add(const float* x, std::size_t m, std::size_t ldx, const Weight& w, float* y, std::size_t ldy,
                         float* scratch) {
  matmul(x, m, ldx, w, w.rows, scratch, w.rows);
  if (ldy == w.rows) {
    add(y, scratch, m * w.rows);
  } else {
    for (std::size_t r = 0; r < m; ++r) add(y + r * ldy, scratch + r * w.rows, w.rows);
  }
}

void Backend::matmul_swiglu(const float* x, std::size_t m, std::size_t ldx, const Weight& gate, const Weight& up,
                            float* out, std::size_t ldo, float* scratch) {
  matmul(x, m, ldx, gate, gate.rows, out, ldo);
  matmul(x, m, ldx, up, up.rows, scratch, up.rows);
  silu_mul(out, ldo, scratch, up.rows, out, ldo, m, gate.rows);
}

void Backend::head_norm_rope(float* x, std::size_t n_tokens, std::size_t n_heads, std::size_t head_dim, std::size_t ld,
                             const float* norm_weight, float eps, std::size_t rotary_dim, const float* cos,
                             const float* sin) {
  if (ld == n_heads * head_dim) {
    rms_norm(x, x, n_tokens * n_heads, head_dim, head_dim, norm_weight, eps);
  } else {
    for (std::size_t t = 0; t < n_tokens; ++t) rms_norm(x + t * ld, x + t * ld, n_heads, head_dim, head_dim, norm_weight, eps);
  }
  rope(x, n_tokens, n_heads, head_dim, ld, rotary_dim, cos, sin);
}

void Backend::begin_capture() { throw std::logic_error("this backend cannot record ops"); }
std::unique_ptr<CapturedOps> Backend::end_capture() { throw std::logic_error("this backend cannot record ops"); }
bool Backend::replay(const CapturedOps&) { return false; }

DeviceBuffer Backend::load_vector(std::span<const float> host) {
  DeviceBuffer b = alloc(host.size() * sizeof(float));
  upload(b.data(), host.data(), host.size() * sizeof(float));
  return b;
}

}  // namespace quarry::engine
