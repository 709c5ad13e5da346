#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs the default test set with ctest.
#
# usage: scripts/test.sh [--sanitize] [--all] [-- extra ctest args]
#   --sanitize  build in build-asan with AddressSanitizer + UndefinedBehaviorSanitizer
#   --all       also run the tests labelled slow and fuzz
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build_dir="$here/build"
setup_args=()
exclude='slow|fuzz'
while [ $# -gt 0 ]; do
  case "$1" in
    --sanitize) build_dir="$here/build-asan"; setup_args+=(--sanitize --build-type RelWithDebInfo) ;;
    --all) exclude='' ;;
    --) shift; break ;;
    *) echo "test.sh: unknown option $1" >&2; exit 1 ;;
  esac
  shift
done
"$here/scripts/setup.sh" --build-dir "$build_dir" "${setup_args[@]}"
cd "$build_dir"
args=(--output-on-failure -j "$(nproc)" --timeout 600)
if [ -n "$exclude" ]; then args+=(-LE "$exclude"); fi
ctest "${args[@]}" "$@"
