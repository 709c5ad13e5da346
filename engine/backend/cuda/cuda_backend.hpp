// The CUDA backend: the Backend interface on an NVIDIA GPU (one device, one stream). Weights stay in
// their stored dtype in device memory (bf16 under bf16 compute); decode-sized products run on
// bandwidth-bound GEMV kernels, larger ones on cuBLAS (bf16 tensor cores, f32 accumulation) under bf16
// compute or on an f32 tiled kernel under exact compute; the paged KV cache lives in device memory
// and attention reads it through the block tables (split over the context for long sequences, the
// partial softmax states combined as in flash-decoding). This header needs no CUDA headers.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "engine/backend/backend.hpp"

namespace quarry::engine::cuda {

/// CUDA devices the driver reports; 0 when there is no GPU or no driver (never throws).
int device_count();

/// A backend on CUDA device `index`. Throws std::runtime_error naming the device and the CUDA error when
/// there is no driver, no such device, or it cannot be initialised.
std::shared_ptr<Backend> make_cuda_backend(int index);

/// The CUDA stream (a cudaStream_t) every op of `backend` runs on. Throws std::invalid_argument when
/// `backend` is not a CUDA backend.
void* stream_of(Backend& backend);

}  // namespace quarry::engine::cuda

#include "engine/backend/collective.hpp"

namespace quarry::engine::cuda {

/// NCCL communicators of one process over the devices of `backends` (ncclCommInitAll), rank r on
/// backends[r]'s stream. NCCL is loaded at run time: QUARRY_NCCL (a path), then libnccl.so.2 on the
/// loader's path. Throws std::runtime_error when it cannot be loaded or initialised.
std::vector<std::unique_ptr<Collective>> make_nccl_collectives(std::span<const std::shared_ptr<Backend>> backends);

}  // namespace quarry::engine::cuda
