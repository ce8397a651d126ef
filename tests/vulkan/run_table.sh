#!/usr/bin/env bash
# run_table.sh PROGRAM GOLDEN DEVICE [ARGS...] — runs the conformance table (or the gradient
# check) on one vulkan device, as ctest's conformance_vulkan_* tests do with EMBER_VULKAN_STAGING
# or EMBER_VULKAN_VALIDATION set. Exits 77 (ctest's SKIP_RETURN_CODE) when the program's list of
# devices lacks DEVICE (no Vulkan driver), saying so; fails when the validation layer reports
# anything ("ember: vulkan validation:" lines on stderr).
set -u
prog=$1 golden=$2 dev=$3
shift 3
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
"$prog" "$golden" --device "$dev" "$@" >"$out" 2>"$err"
rc=$?
cat "$out"
cat "$err" >&2
# the first line names the devices: "conformance: devices: ref ... vulkan vulkan+autodiff ..."
if ! grep -m1 ': devices:' "$out" | grep -Eq " ${dev//+/\\+}([ +]|$)"; then
    echo "skipped: no $dev device on this machine (install mesa-vulkan-drivers for lavapipe)"
    exit 77
fi
if grep -q 'ember: vulkan validation:' "$err"; then
    echo "FAIL: the Vulkan validation layer reported $(grep -c 'ember: vulkan validation:' "$err") message(s)"
    exit 1
fi
exit $rc
