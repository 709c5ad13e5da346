#!/usr/bin/env bash
# Idempotent setup for a fresh Debian 12 machine: installs every build and runtime
# dependency with apt-get (only what is missing), then configures and builds quarry.
#
# usage: scripts/setup.sh [--no-build] [--build-dir DIR] [--build-type TYPE] [--sanitize]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build_dir="$here/build"
build_type=Release
do_build=1
sanitize=OFF
while [ $# -gt 0 ]; do
  case "$1" in
    --no-build) do_build=0 ;;
    --build-dir) build_dir=$2; shift ;;
    --build-type) build_type=$2; shift ;;
    --sanitize) sanitize=ON ;;
    *) echo "setup.sh: unknown option $1" >&2; exit 1 ;;
  esac
  shift
done

packages=(
  build-essential cmake ninja-build pkg-config git clang libclang-rt-14-dev
  libpoppler-cpp-dev libpoppler-private-dev poppler-utils qpdf libqpdf-dev libxml2-dev libssl-dev
  nlohmann-json3-dev libspdlog-dev libfmt-dev libcli11-dev libexpected-dev
  libzmq3-dev cppzmq-dev libnats-dev nats-server libcpp-httplib-dev libsqlite3-dev libvalijson-dev libre2-dev libtomlplusplus-dev
  libicu-dev
  libgtest-dev libgmock-dev libbenchmark-dev json-schema-test-suite python3-jsonschema
  python3 python3-stdnum zlib1g-dev unicode-data iso-codes curl
)

. "$here/scripts/lib/apt-install.sh"
apt_install_missing setup "${packages[@]}"

if [ $do_build = 1 ]; then
  jobs=$(nproc)
  cmake -S "$here" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE="$build_type" -DQUARRY_SANITIZE="$sanitize" >/dev/null
  cmake --build "$build_dir" -j "$jobs"
fi
