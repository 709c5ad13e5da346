#include "pipeline/run/outdir.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace quarry::run {

namespace {

std::string errno_text(int e) { return e == ELOOP ? "is a symbolic link: refusing to follow it" : std::strerror(e); }

/// Reads the pid written by the lock's holder (0 when unknown).
pid_t read_holder(int fd) {
  char buf[32] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return 0;
  return static_cast<pid_t>(std::strtol(buf, nullptr, 10));
}

bool write_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

}  // namespace

OutdirBusy::OutdirBusy(const std::filesystem::path& dir, pid_t holder)
    : std::runtime_error(dir.string() + ": OUTDIR is in use by pid " +
                         (holder > 0 ? std::to_string(holder) : std::string("(unknown)"))),
      holder_(holder) {}

OutdirLock::OutdirLock(const std::filesystem::path& dir) : dir_(dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw std::runtime_error(dir.string() + ": cannot create the output folder: " + ec.message());
  const auto path = dir / lock_name;
  fd_ = open_nofollow(path, O_RDWR | O_CREAT);
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    const pid_t holder = read_holder(fd_);
    ::close(fd_);
    fd_ = -1;
    if (e == EWOULDBLOCK) throw OutdirBusy(dir, holder);
    throw std::runtime_error(path.string() + ": cannot lock: " + std::strerror(e));
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    // The lock holds anyway; only the "in use by pid N" message of a second run loses its pid.
  }
}

OutdirLock::~OutdirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

int open_nofollow(const std::filesystem::path& path, int flags, mode_t mode) {
  const int fd = ::open(path.c_str(), flags | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) throw std::runtime_error(path.string() + ": cannot open: " + errno_text(errno));
  return fd;
}

void refuse_symlink(const std::filesystem::path& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode))
    throw std::runtime_error(path.string() + ": is a symbolic link: refusing to follow it");
}

void write_file_atomically(const std::filesystem::path& path, const std::string& text) {
  std::string tmpl = path.string() + ".tmp.XXXXXX";
  std::vector<char> name(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  const int fd = ::mkostemp(name.data(), O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(tmpl + ": cannot create: " + std::strerror(errno));
  const std::string tmp(name.data());
  const auto fail = [&](const std::string& what) {
    const int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    throw std::runtime_error(tmp + ": " + what + ": " + std::strerror(e));
  };
  if (::fchmod(fd, 0644) != 0) fail("chmod");
  if (!write_all(fd, text.data(), text.size())) fail("write failed");
  if (::fsync(fd) != 0) fail("fsync failed");
  if (::close(fd) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw std::runtime_error(tmp + ": close failed: " + std::strerror(e));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw std::runtime_error(path.string() + ": cannot replace: " + std::strerror(e));
  }
}

}  // namespace quarry::run
