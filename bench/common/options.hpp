// The benchmarks' command lines: `--name value` options, -h / --help for the usage. Header-only.
#pragma once

#include <exception>
#include <functional>
#include <iostream>
#include <string>

namespace quarry::bench {

/// Walks argv[1..] as `--name value` pairs, calling set(name, value) for each; set returns false for a
/// name it does not know and may throw on a bad value (std::stoul and the like). Returns -1 when every
/// option was taken; otherwise the exit code for main: 0 after printing `usage` for -h / --help, 2 after
/// printing an error naming the option (unknown, missing its value, or a value set() refused) and the
/// usage on stderr.
inline int parse_options(int argc, char** argv, const std::string& program, const std::string& usage,
                         const std::function<bool(const std::string& name, const std::string& value)>& set) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::cout << usage;
      return 0;
    }
    if (i + 1 >= argc) {
      std::cerr << program << ": " << a << " needs a value\n" << usage;
      return 2;
    }
    const std::string v = argv[++i];
    try {
      if (!set(a, v)) {
        std::cerr << program << ": unknown option " << a << "\n" << usage;
        return 2;
      }
    } catch (const std::exception& e) {
      std::cerr << program << ": " << a << " " << v << ": invalid value (" << e.what() << ")\n";
      return 2;
    }
  }
  return -1;
}

}  // namespace quarry::bench
