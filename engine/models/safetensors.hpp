// Memory-mapped safetensors checkpoints: one file or a sharded set with model.safetensors.index.json.
//
// Format (huggingface/safetensors, docs "format"): 8-byte little-endian header length N, then N bytes of
// JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the data block;
// offsets are relative to the start of the data block. Tensors are row-major, little-endian.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/models/config.hpp"

namespace quarry::engine {

/// A read-only memory mapping of a whole file (POSIX mmap). Move-only.
class MappedFile {
 public:
  /// Throws std::runtime_error naming the file if it cannot be opened or mapped.
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

/// A tensor inside a mapped file: data points into the mapping (valid while the store lives).
struct TensorView {
  std::string name;
  /// The float dtype (F32, F16, BF16); for the integer and FP8 types of quantized checkpoints
  /// (`stored` I64, I32, I16, I8, U8, F8_E4M3) it is unused and `is_float` is false.
  DType dtype = DType::f32;
  bool is_float = true;
  std::string stored = "F32";     ///< the safetensors dtype name
  std::size_t element_size = 4;   ///< bytes per element
  std::vector<std::size_t> shape;
  const void* data = nullptr;
  std::size_t n_bytes = 0;
  const std::filesystem::path* file = nullptr;  ///< the shard holding it (for messages)

  std::size_t numel() const;
};

/// "[a, b, c]"
std::string shape_string(const std::vector<std::size_t>& shape);

/// One mapped .safetensors file with its parsed header.
class SafetensorsFile {
 public:
  /// Maps and validates the file: header length within the file, JSON well-formed, every tensor with
  /// a supported dtype (F32, F16, BF16, and for quantized checkpoints I64, I32, I16, I8, U8, F8_E4M3), offsets inside the data block and matching dtype x shape.
  /// Throws std::runtime_error naming the file and the tensor on any violation (truncated file,
  /// bad header, unsupported dtype). A tensor whose data is not aligned to its element size (a header
  /// not padded to 8 bytes) is copied once into an aligned buffer; all others stay in the mapping.
  explicit SafetensorsFile(const std::filesystem::path& path);

  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::filesystem::path& path() const { return file_.path(); }

 private:
  MappedFile file_;
  std::map<std::string, TensorView> tensors_;
  std::vector<std::unique_ptr<std::uint64_t[]>> owned_;  ///< aligned copies of misaligned tensors
};

/// All tensors of a model directory: `model.safetensors.index.json` (weight_map -> shard files) if
/// present, else `model.safetensors`. Shards are mapped once each; weights are never copied.
class TensorStore {
 public:
  /// Throws std::runtime_error naming the file on a missing checkpoint, a bad index, or a shard error.
  static std::unique_ptr<TensorStore> open(const std::filesystem::path& model_dir);

  /// The float tensor `name` with exactly `shape`. Throws std::runtime_error naming the checkpoint file and
  /// the tensor if it is missing, its shape differs, or it is not F32, F16 or BF16 (a quantized tensor).
  const TensorView& get(const std::string& name, const std::vector<std::size_t>& shape) const;
  /// The tensor `name` of safetensors dtype `stored` ("I32", "F8_E4M3", ...) with exactly `shape` (an empty
  /// `stored`: any dtype). Throws as get().
  const TensorView& get_raw(const std::string& name, const std::vector<std::size_t>& shape,
                            const std::string& stored) const;
  /// The tensor `name` whatever its shape and dtype (null if absent).
  const TensorView* find(const std::string& name) const;

  /// True if the checkpoint has `name`.
  bool has(const std::string& name) const;

  /// Sum of the byte sizes of all tensors.
  std::size_t total_bytes() const;

  /// What error messages name as the checkpoint (index file or single file).
  const std::filesystem::path& origin() const { return origin_; }

 private:
  std::filesystem::path origin_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::map<std::string, const TensorView*> index_;
};

}  // namespace quarry::engine
