#include "pipeline/extract/input_file.hpp"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

namespace quarry::extract {

std::string special_file_reason(mode_t mode) {
  if (S_ISREG(mode)) return {};
  if (S_ISDIR(mode)) return "is a directory";
  if (S_ISFIFO(mode)) return "not a regular file (FIFO)";
  if (S_ISCHR(mode)) return "not a regular file (character device)";
  if (S_ISBLK(mode)) return "not a regular file (block device)";
  if (S_ISSOCK(mode)) return "not a regular file (socket)";
  return "not a regular file";
}

std::optional<int> open_input(const std::string& path, std::uint64_t max_file_bytes, std::uint64_t& size,
                              std::string& reason) {
  size = 0;
  // A special file is refused before it is opened (opening a device can have effects of its own).
  struct stat before {};
  if (::stat(path.c_str(), &before) == 0) {
    if (auto special = special_file_reason(before.st_mode); !special.empty()) {
      reason = std::move(special);
      return std::nullopt;
    }
  }
  // O_NONBLOCK: a FIFO swapped in since does not block the open; O_NOCTTY: a terminal device never
  // becomes the controlling terminal. fstat then checks what was really opened.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    reason = errno == ENOENT ? "no such file" : std::string("cannot open: ") + std::strerror(errno);
    return std::nullopt;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    reason = std::string("cannot stat: ") + std::strerror(errno);
    ::close(fd);
    return std::nullopt;
  }
  if (auto special = special_file_reason(st.st_mode); !special.empty()) {
    reason = std::move(special);
    ::close(fd);
    return std::nullopt;
  }
  size = static_cast<std::uint64_t>(st.st_size);
  if (size > max_file_bytes) {
    reason = "file is " + std::to_string(size) + " bytes, larger than the limit of " + std::to_string(max_file_bytes);
    ::close(fd);
    return std::nullopt;
  }
  return fd;
}

namespace {

/// The finished digest of `ctx` in lowercase hex.
std::string hex_digest(EVP_MD_CTX* ctx) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx, md, &len) != 1) throw std::runtime_error("SHA-256 is not available");
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += hex[md[i] >> 4];
    out += hex[md[i] & 15];
  }
  return out;
}

}  // namespace

std::optional<std::string> sha256_of_fd(int fd, std::string& reason) {
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
    reason = "SHA-256 is not available";
    return std::nullopt;
  }
  std::vector<unsigned char> buf(1 << 16);
  off_t off = 0;
  for (;;) {
    const ssize_t n = ::pread(fd, buf.data(), buf.size(), off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      reason = std::string("read error: ") + std::strerror(errno);
      return std::nullopt;
    }
    if (n == 0) break;
    EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<std::size_t>(n));
    off += n;
  }
  return hex_digest(ctx.get());
}

std::string sha256_of_bytes(std::string_view bytes) {
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1 ||
      EVP_DigestUpdate(ctx.get(), bytes.data(), bytes.size()) != 1)
    throw std::runtime_error("SHA-256 is not available");
  return hex_digest(ctx.get());
}

}  // namespace quarry::extract
