// The output folder of a run (OUTDIR) is the run's alone: an exclusive lock for the whole run, and
// files that are never reached through a symbolic link somebody planted there.
//
// - OutdirLock: flock(2) on OUTDIR/.quarry.lock (created with O_NOFOLLOW, close-on-exec, so child
//   processes never inherit it), LOCK_EX | LOCK_NB. The holder's pid is written into the file so
//   that a second run can say who holds it. The kernel drops the lock when the holder dies (kill -9
//   included): a stale lock file is harmless.
// - open_nofollow / write_file_atomically: every file quarry creates or rewrites in OUTDIR is opened
//   with O_NOFOLLOW (a symlink gives ELOOP: refused), or written to a fresh temporary file (mkostemp:
//   O_CREAT | O_EXCL, which never follows a symlink) and renamed over the target (rename replaces
//   the link itself, never the file it points to).
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <stdexcept>
#include <string>

namespace quarry::run {

/// Thrown by OutdirLock when another process holds OUTDIR. `quarry run` exits with status 2.
class OutdirBusy : public std::runtime_error {
 public:
  OutdirBusy(const std::filesystem::path& dir, pid_t holder);
  pid_t holder() const { return holder_; }

 private:
  pid_t holder_;
};

/// An exclusive lock on an output folder, held until destruction. Creates the folder if needed.
class OutdirLock {
 public:
  static constexpr const char* lock_name = ".quarry.lock";

  /// Takes the lock without waiting. Throws OutdirBusy (message "OUTDIR is in use by pid N") when
  /// another process holds it, std::runtime_error naming the file for anything else (the folder
  /// cannot be created, the lock file is a symbolic link, ...).
  explicit OutdirLock(const std::filesystem::path& dir);
  ~OutdirLock();
  OutdirLock(const OutdirLock&) = delete;
  OutdirLock& operator=(const OutdirLock&) = delete;

  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
  int fd_ = -1;
};

/// open(2) of `path` with O_NOFOLLOW | O_CLOEXEC added to `flags`. Throws std::runtime_error naming
/// the file ("is a symbolic link: refusing to follow it" for ELOOP, the errno text otherwise).
int open_nofollow(const std::filesystem::path& path, int flags, mode_t mode = 0644);

/// Throws std::runtime_error naming the file if `path` exists and is a symbolic link.
void refuse_symlink(const std::filesystem::path& path);

/// Writes `text` to a fresh temporary file beside `path` (created with O_EXCL), fsyncs it and renames
/// it over `path`. A symbolic link at `path` is replaced, the file it points to is left alone.
/// Throws std::runtime_error naming the file on I/O errors (the temporary file is removed).
void write_file_atomically(const std::filesystem::path& path, const std::string& text);

}  // namespace quarry::run
