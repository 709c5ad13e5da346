// The CUDA backend: the Backend interface on an NVIDIA GPU (one device, one stream). Weights stay in
// their stored dtype in device memory (bf16 under bf16 compute); decode-sized products run on
// bandwidth-bound GEMV kernels, larger ones on cuBLAS (bf16 tensor cores, f32 accumulation) under bf16
// compute or on an f32 tiled kernel under exact compute; the paged KV cache lives in device memory
// and attention reads it through the block tables (split over the context for long sequences, the
// partial softmax states combined as in flash-decoding). This header needs no CUDA headers.
#pragma once

#include <memory>

#include "engine/backend/backend.hpp"

namespace quarry::engine::cuda {

/// CUDA devices the driver reports; 0 when there is no GPU or no driver (never throws).
int device_count();

/// A backend on CUDA device `index`. Throws std::runtime_error naming the device and the CUDA error when
/// there is no driver, no such device, or it cannot be initialised.
std::shared_ptr<Backend> make_cuda_backend(int index);

}  // namespace quarry::engine::cuda
