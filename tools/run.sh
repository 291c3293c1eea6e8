#!/usr/bin/env bash
# run.sh - quick start (1): install what is missing, build, and run
# `parley serve` on the embedded default (./parley-data). Extra arguments go
# to `parley serve`, e.g. tools/run.sh --workers 2.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/bootstrap.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
exec build/parley serve "$@"
