// A steady-clock stopwatch (timings counted where the work happens).
#pragma once

#include <chrono>

namespace quarry::engine {

/// Seconds since construction (steady clock).
class Stopwatch {
 public:
  Stopwatch() : t0_(std::chrono::steady_clock::now()) {}
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }

 private:
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace quarry::engine
