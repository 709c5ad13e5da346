// Opening an input file for extraction, safely: never blocking on a FIFO, never opening a device or
// socket, never reading more than the size limit; and its SHA-256 streamed from the descriptor.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace quarry::extract {

/// Opens `path` to extract it without blocking or side effects: stat(2) first (a special file is never
/// opened), then O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, then fstat(2) must show a regular file
/// of at most `max_file_bytes`. Returns the
/// descriptor, or the reason ("no such file", "not a regular file (FIFO)", "file is N bytes, larger
/// than the limit of M", the errno text). `size` receives the file's size.
std::optional<int> open_input(const std::string& path, std::uint64_t max_file_bytes, std::uint64_t& size,
                              std::string& reason);

/// "not a regular file (FIFO)" and the like for a st_mode that is not a regular file; empty for one that is.
std::string special_file_reason(mode_t mode);

/// SHA-256 of an open file's bytes (pread from offset 0, streamed in 64 KiB pieces; FIPS 180-4 by
/// OpenSSL's EVP interface) as 64 lowercase hex digits; nullopt with `reason` on a read error.
std::optional<std::string> sha256_of_fd(int fd, std::string& reason);
/// SHA-256 of `bytes`, lowercase hex. Throws std::runtime_error when the digest is not available.
std::string sha256_of_bytes(std::string_view bytes);

}  // namespace quarry::extract
