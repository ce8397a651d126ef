#!/usr/bin/env bash
# scripts/run.sh — sets up ember and runs its main job: installs the Debian packages it needs,
# builds it (Release, under build/release), then shows what this build and machine have
# (ember-info), runs the main job — one epoch of the MLP on Fashion-MNIST with ember-train on
# the default device, then its test accuracy — and then the README's example
# (examples/hello.c) and the dispatch benchmark (public API vs the ref kernel called directly).
# Environment: JOBS (default 2), EMBER_DEVICE (the device ember-train and the example run on).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${JOBS:-2}
step() { printf '\n==== %s\n' "$*"; }

step "dependencies"
bash scripts/install-deps.sh

step "build"
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build/release -j "$jobs"

step "ember-info"
build/release/ember-info

step "ember-train --epochs 1 (the main job)"
build/release/ember-train --epochs 1

step "examples/hello"
if [ ! -x build/release/examples/hello ]; then
    echo "build/release/examples/hello was not built (CMakeLists.txt lacks add_subdirectory(examples))" >&2
    exit 1
fi
build/release/examples/hello

step "ember-bench dispatch"
build/release/ember-bench dispatch
