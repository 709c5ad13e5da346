// The device the engine tests run on: "cpu" in the default build of a test, "cuda" in its gpu-labelled
// build (QUARRY_TEST_DEVICE, set by tests/CMakeLists.txt quarry_test(... GPU)).
#pragma once

#include <memory>
#include <string>

#include "engine/backend/backend.hpp"

#ifndef QUARRY_TEST_DEVICE
#define QUARRY_TEST_DEVICE "cpu"
#endif

namespace quarry::engine::testing {

inline std::string test_device_name() { return QUARRY_TEST_DEVICE; }
inline DeviceSpec test_device() { return parse_device(QUARRY_TEST_DEVICE); }
/// True when the test device is a GPU.
inline bool on_gpu() { return test_device().kind != DeviceSpec::Kind::cpu; }

/// Whether this machine has the test device.
inline bool test_device_present() {
  const DeviceSpec d = test_device();
  return d.kind == DeviceSpec::Kind::cpu || cuda_device_count() > d.index;
}

/// A backend on the test device (`threads` for the CPU). Throws std::runtime_error (make_backend's clear
/// message) when this machine has no such device.
inline std::shared_ptr<Backend> test_backend(std::size_t threads = 2) { return make_backend({test_device(), threads}); }

}  // namespace quarry::engine::testing
