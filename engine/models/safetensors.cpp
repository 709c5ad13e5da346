#include "engine/models/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>

namespace quarry::engine {

namespace {
[[noreturn]] void fail(const std::filesystem::path& file, const std::string& why) {
  throw std::runtime_error(file.string() + ": " + why);
}
}  // namespace

MappedFile::MappedFile(const std::filesystem::path& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fail(path, std::string("cannot stat: ") + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, "not a regular file");
  }
  size_ = static_cast<std::size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      fail(path, std::string("cannot mmap: ") + std::strerror(e));
    }
    data_ = static_cast<const std::uint8_t*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<std::uint8_t*>(data_), size_);
}

std::size_t TensorView::numel() const {
  std::size_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::string shape_string(const std::vector<std::size_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path) : file_(path) {
  const std::size_t size = file_.size();
  if (size < 8) fail(path, "truncated safetensors file: " + std::to_string(size) + " bytes, no header length");
  std::uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | file_.data()[i];
  if (header_len > size - 8)
    fail(path, "truncated safetensors file or bad header: header length " + std::to_string(header_len) +
                   " exceeds the file size " + std::to_string(size));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(file_.data() + 8, file_.data() + 8 + header_len);
  } catch (const nlohmann::json::parse_error& e) {
    fail(path, std::string("bad safetensors header (malformed JSON): ") + e.what());
  }
  if (!header.is_object()) fail(path, "bad safetensors header: not a JSON object");
  const std::uint8_t* data_block = file_.data() + 8 + header_len;
  const std::size_t data_size = size - 8 - header_len;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const auto& t = it.value();
    const std::string& name = it.key();
    if (!t.is_object() || !t.contains("dtype") || !t.contains("shape") || !t.contains("data_offsets"))
      fail(path, "bad safetensors header: tensor '" + name + "' lacks dtype, shape or data_offsets");
    TensorView v;
    v.name = name;
    v.file = &file_.path();
    if (!t["dtype"].is_string()) fail(path, "bad safetensors header: tensor '" + name + "' dtype is not a string");
    const std::string dt = t["dtype"].get<std::string>();
    v.stored = dt;
    if (dt == "F32") v.dtype = DType::f32;
    else if (dt == "F16") v.dtype = DType::f16;
    else if (dt == "BF16") v.dtype = DType::bf16;
    else if (dt == "I64") v.element_size = 8;
    else if (dt == "I32") v.element_size = 4;
    else if (dt == "I16") v.element_size = 2;
    else if (dt == "I8" || dt == "U8" || dt == "F8_E4M3") v.element_size = 1;
    else
      fail(path, "unsupported dtype " + dt + " of tensor '" + name +
                     "' (supported: F32, F16, BF16; I64, I32, I16, I8, U8, F8_E4M3 in quantized checkpoints)");
    v.is_float = dt == "F32" || dt == "F16" || dt == "BF16";
    if (v.is_float) v.element_size = dtype_size(v.dtype);
    const auto& shape = t["shape"];
    const auto& off = t["data_offsets"];
    if (!shape.is_array() || !off.is_array() || off.size() != 2)
      fail(path, "bad safetensors header: tensor '" + name + "' has a malformed shape or data_offsets");
    for (const auto& d : shape) {
      if (!d.is_number_unsigned()) fail(path, "bad safetensors header: tensor '" + name + "' has a bad dimension");
      v.shape.push_back(d.get<std::size_t>());
    }
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      fail(path, "bad safetensors header: tensor '" + name + "' has bad data_offsets");
    const std::size_t begin = off[0].get<std::size_t>(), end = off[1].get<std::size_t>();
    if (begin > end) fail(path, "bad safetensors header: tensor '" + name + "' has data_offsets begin > end");
    if (end > data_size)
      fail(path, "truncated safetensors file: tensor '" + name + "' ends at byte " + std::to_string(end) +
                     " of a data block of " + std::to_string(data_size) + " bytes");
    v.n_bytes = end - begin;
    if (v.n_bytes != v.numel() * v.element_size)
      fail(path, "bad safetensors header: tensor '" + name + "' has " + std::to_string(v.n_bytes) +
                     " bytes but its dtype and shape " + shape_string(v.shape) + " need " +
                     std::to_string(v.numel() * v.element_size));
    v.data = data_block + begin;
    if (reinterpret_cast<std::uintptr_t>(v.data) % v.element_size != 0) {
      // The reference writer pads the header so that data starts 8-byte aligned; other writers may not.
      // Typed loads need alignment, so such a tensor is copied once into an aligned buffer.
      owned_.push_back(std::make_unique<std::uint64_t[]>((v.n_bytes + 7) / 8));
      std::memcpy(owned_.back().get(), v.data, v.n_bytes);
      v.data = owned_.back().get();
    }
    tensors_.emplace(name, std::move(v));
  }
}

std::unique_ptr<TensorStore> TensorStore::open(const std::filesystem::path& dir) {
  auto store = std::unique_ptr<TensorStore>(new TensorStore());
  const auto index_path = dir / "model.safetensors.index.json";
  const auto single_path = dir / "model.safetensors";
  std::error_code ec;
  if (std::filesystem::exists(index_path, ec)) {
    store->origin_ = index_path;
    std::ifstream in(index_path, std::ios::binary);
    if (!in) fail(index_path, "cannot open");
    nlohmann::json idx;
    try {
      idx = nlohmann::json::parse(in);
    } catch (const nlohmann::json::parse_error& e) {
      fail(index_path, std::string("malformed JSON: ") + e.what());
    }
    if (!idx.is_object() || !idx.contains("weight_map") || !idx["weight_map"].is_object())
      fail(index_path, "missing \"weight_map\" object");
    std::map<std::string, std::size_t> shard_of_file;
    for (auto it = idx["weight_map"].begin(); it != idx["weight_map"].end(); ++it) {
      if (!it.value().is_string()) fail(index_path, "weight_map entry '" + it.key() + "' is not a file name");
      const std::string shard = it.value().get<std::string>();
      if (shard.find('/') != std::string::npos || shard.find("..") != std::string::npos)
        fail(index_path, "weight_map entry '" + it.key() + "' names a file outside the model folder: " + shard);
      auto [pos, inserted] = shard_of_file.emplace(shard, store->shards_.size());
      if (inserted) store->shards_.push_back(std::make_unique<SafetensorsFile>(dir / shard));
      const auto& tensors = store->shards_[pos->second]->tensors();
      auto t = tensors.find(it.key());
      if (t == tensors.end())
        fail(dir / shard, "missing tensor '" + it.key() + "' (listed for this file in " + index_path.string() + ")");
      store->index_[it.key()] = &t->second;
    }
  } else if (std::filesystem::exists(single_path, ec)) {
    store->origin_ = single_path;
    store->shards_.push_back(std::make_unique<SafetensorsFile>(single_path));
    for (const auto& [name, t] : store->shards_[0]->tensors()) store->index_[name] = &t;
  } else {
    fail(dir, "no model.safetensors or model.safetensors.index.json in the model folder");
  }
  return store;
}

const TensorView& TensorStore::get(const std::string& name, const std::vector<std::size_t>& shape) const {
  const TensorView& t = get_raw(name, shape, "");
  if (!t.is_float)
    fail(*t.file, "tensor '" + name + "' is " + t.stored +
                      " where F32, F16 or BF16 is expected (a quantized tensor the config's quantization_config "
                      "does not describe)");
  return t;
}

const TensorView& TensorStore::get_raw(const std::string& name, const std::vector<std::size_t>& shape,
                                       const std::string& stored) const {
  auto it = index_.find(name);
  if (it == index_.end()) fail(origin_, "missing tensor '" + name + "'");
  const TensorView& t = *it->second;
  if (t.shape != shape)
    fail(*t.file, "shape mismatch for tensor '" + name + "': expected " + shape_string(shape) + ", found " +
                      shape_string(t.shape));
  if (!stored.empty() && t.stored != stored)
    fail(*t.file, "tensor '" + name + "' is " + t.stored + ", expected " + stored);
  return t;
}

const TensorView* TensorStore::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

bool TensorStore::has(const std::string& name) const { return index_.count(name) != 0; }

std::size_t TensorStore::total_bytes() const {
  std::size_t n = 0;
  for (const auto& [_, t] : index_) n += t->n_bytes;
  return n;
}

}  // namespace quarry::engine
