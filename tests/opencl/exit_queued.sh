#!/usr/bin/env bash
# Runs exit_queued (argument 1) several times, each with empty driver and ember caches, and
# fails unless every run exits 0 after printing "queued". Exit status 77 (skipped) without an
# OpenCL device.
set -u
prog=$1
runs=${EXIT_QUEUED_RUNS:-3}
for i in $(seq "$runs"); do
    cache=$(mktemp -d)
    out=$(XDG_CACHE_HOME=$cache POCL_CACHE_DIR=$cache/pocl EMBER_CACHE_DIR=$cache/ember \
          "$prog" 2>"$cache/stderr")
    rc=$?
    err=$(cat "$cache/stderr")
    rm -rf "$cache"
    if [ $rc -eq 77 ]; then echo "$out"; exit 77; fi
    if [ $rc -ne 0 ] || [ "$out" != queued ]; then
        echo "exit_queued.sh: run $i exited $rc:"
        echo "$out"
        echo "$err"
        exit 1
    fi
done
echo "exit_queued.sh: $runs runs with cold caches exited cleanly"
