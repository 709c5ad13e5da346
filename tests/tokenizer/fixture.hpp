// Code shared by the tokenizer tests: the Qwen3 tokenizer and the gzip-compressed reference fixture
// (generated with Hugging Face tokenizers / transformers by tools/fixtures/tokenizer/gen_tokenizer_fixtures.py).
#pragma once

#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>

#include "engine/tokenizer/tokenizer.hpp"

namespace quarry::test {

inline std::filesystem::path shared_dir() { return QUARRY_SHARED_DIR; }
inline std::filesystem::path qwen3_tokenizer_path() { return shared_dir() / "tokenizers" / "qwen3" / "tokenizer.json"; }
inline std::filesystem::path fixture_path() {
  return std::filesystem::path(QUARRY_SOURCE_DIR) / "tests" / "tokenizer" / "fixtures" / "tokenizer_fixture.json.gz";
}

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + p.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::string gunzip(const std::string& in) {
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) throw std::runtime_error("inflateInit2 failed");
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  std::string out;
  char buf[1 << 16];
  int rc;
  do {
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof buf;
    rc = inflate(&zs, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      inflateEnd(&zs);
      throw std::runtime_error("gzip data is corrupt");
    }
    out.append(buf, sizeof buf - zs.avail_out);
  } while (rc != Z_STREAM_END);
  inflateEnd(&zs);
  return out;
}

inline const nlohmann::json& fixture() {
  static const nlohmann::json j = nlohmann::json::parse(gunzip(read_file(fixture_path())));
  return j;
}

inline std::shared_ptr<const engine::Tokenizer> qwen3() {
  static const auto tok = engine::Tokenizer::from_file(qwen3_tokenizer_path());
  return tok;
}

inline std::string fnv1a64(std::string_view data) {
  std::uint64_t h = 0xCBF29CE484222325ULL;
  for (const char c : data) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001B3ULL;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace quarry::test
