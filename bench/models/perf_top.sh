#!/bin/sh
# perf_top.sh BUILD_DIR MODEL MODE [STEPS]: where an ember-models step spends its time.
#   MODEL gpt|resnet|mlp, MODE train|infer; threads from EMBER_NUM_THREADS (default 1).
# Records the process with perf (DWARF call graphs) and prints
#   1. the hottest functions by self time (kernels: OpenBLAS's sgemm_*, ember's cpu kernels,
#      ref_* = a cpu slot that ran ref's loop, libm), and
#   2. the inclusive time of ember's backward rules (<op>_backward) and public ops (em_<op>),
#      which attributes the kernels to the model's ops.
# Setup (parameter init: ref_random) is in the record too; --warmup 1 and enough steps keep it
# small. Needs perf and kernel.perf_event_paranoid <= 2.
set -eu
build=$1 model=$2 mode=$3 steps=${4:-20}
data=$(mktemp)
trap 'rm -f "$data"' EXIT
EMBER_NUM_THREADS=${EMBER_NUM_THREADS:-1} perf record -q -e cpu-clock -F 499 --call-graph dwarf,16384 \
    -o "$data" "$build/bench/models/ember-models" "$model" --mode "$mode" --warmup 1 \
    --steps "$steps" >&2
echo "== $model $mode: self time by function"
perf report -i "$data" --no-children --sort dso,sym --stdio 2>/dev/null |
    grep -E '^ +[0-9.]+%' | head -25
echo "== $model $mode: inclusive time of ember's ops and backward rules"
perf report -i "$data" --children --sort sym --stdio -g none 2>/dev/null |
    grep -E '^ +[0-9.]+% +[0-9.]+% .*\] (em_[a-z0-9_]+|[a-z0-9_]+_backward)$' |
    grep -vE 'em_(module_forward|backward)$' | head -30
