#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs the default test set with ctest.
#
# usage: scripts/test.sh [--sanitize] [--all] [--gpu] [-- extra ctest args]
#   --sanitize  build in build-asan with AddressSanitizer + UndefinedBehaviorSanitizer (CPU backend only)
#   --all       also run the tests labelled slow and fuzz
#   --gpu       run only the tests labelled gpu (the engine's tests on cuda:0; needs an NVIDIA GPU and a
#               build with the CUDA backend, which is on where nvcc is found)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build_dir="$here/build"
setup_args=()
exclude='slow|fuzz|gpu'
include=''
while [ $# -gt 0 ]; do
  case "$1" in
    --sanitize) build_dir="$here/build-asan"; setup_args+=(--sanitize --build-type RelWithDebInfo) ;;
    --all) exclude='gpu' ;;
    --gpu) exclude=''; include='gpu' ;;
    --) shift; break ;;
    *) echo "test.sh: unknown option $1" >&2; exit 1 ;;
  esac
  shift
done
"$here/scripts/setup.sh" --build-dir "$build_dir" "${setup_args[@]}"
cd "$build_dir"
args=(--output-on-failure -j "$(nproc)" --timeout 600)
if [ -n "$exclude" ]; then args+=(-LE "$exclude"); fi
if [ -n "$include" ]; then args+=(-L "$include"); fi
ctest "${args[@]}" "$@"
