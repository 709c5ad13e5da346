// The CPU backend: the Backend interface over the kernels of this folder (runtime-dispatched AVX2 /
// AVX-512 / AMX, engine/backend/cpu/gemm.hpp), with its thread pool inside. Device memory is host
// memory. It is the reference the other backends are checked against (tests/backend).
#pragma once

#include <cstddef>
#include <memory>

#include "engine/backend/backend.hpp"

namespace quarry::engine::cpu {

/// A CPU backend with `n_threads` worker threads including the caller (0: all hardware threads).
std::shared_ptr<Backend> make_cpu_backend(std::size_t n_threads = 0);

}  // namespace quarry::engine::cpu
