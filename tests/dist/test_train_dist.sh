#!/usr/bin/env bash
# test_train_dist.sh EMBER_TRAIN MPIEXEC NPFLAG — ember-train --distributed (data-parallel over
# MPI, include/ember/dist.h) against one process: the MLP on Fashion-MNIST, 200 steps of a
# global batch of 64 over 2 ranks (and of 66 over 3 ranks, oversubscribed) must end at the loss
# of one process training on the same global batches (same seed, same shuffled order) within
# REL_TOL relative: the last step's loss ("loss after step 200: ...", full precision) and the
# epoch's mean. Rank 0 alone prints (one "final:" line) and saves (--save): the saved model,
# evaluated by one process (--load --eval), gives the accuracy the run reported. A global batch
# that is not a multiple of the ranks exits 2. Exits 77 (ctest SKIP_RETURN_CODE) without the
# data set, as tests/train/test_train.sh.
set -u
bin=$1
mpiexec=${2:-mpiexec}
npflag=${3:--n}
REL_TOL=1e-4
STEPS=200
dir=${EMBER_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# ranks share the machine's cores: one thread each
export EMBER_NUM_THREADS=${EMBER_NUM_THREADS:-1}
# the sanitizer options set by ctest (tests/dist/CMakeLists.txt) reach every rank
xenv=()
for v in ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS; do
    [ -n "${!v:-}" ] && xenv+=(-x "$v")
done
fail=0
if [ ! -r "$dir/train-images-idx3-ubyte.gz" ] || [ ! -r "$dir/t10k-images-idx3-ubyte.gz" ]; then
    echo "skipping: Fashion-MNIST not found in $dir (apt-get install dataset-fashion-mnist)"
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

field() { # field KEY TEXT: the value of KEY=... on the last "final:" line
    echo "$2" | grep '^final: ' | tail -1 | sed -n "s/.*$1=\([^ ]*\).*/\1/p"
}
step_loss() { echo "$1" | sed -n "s/^loss after step $STEPS: \([^ ]*\)$/\1/p" | tail -1; }
close() { # close A B: |A - B| <= REL_TOL * |B|
    awk -v a="$1" -v b="$2" -v t="$REL_TOL" 'BEGIN{ d = a - b; if (d < 0) d = -d;
        m = b < 0 ? -b : b; exit !(a != "" && b != "" && d <= t * m) }'
}

# compare NRANKS BATCH: --distributed over NRANKS against one process, global batch BATCH
compare() {
    local n=$1 batch=$2 over=
    local limit=$((STEPS * batch))
    [ "$n" -gt 2 ] && over=--oversubscribe
    local args=(--device cpu --model mlp --batch "$batch" --limit "$limit" --epochs 1 --seed 3
                --test-limit 1000)
    local one many rc1 rcn
    one=$("$bin" "${args[@]}" 2>&1)
    rc1=$?
    # shellcheck disable=SC2086
    many=$("$mpiexec" $over "${xenv[@]}" "$npflag" "$n" "$bin" --distributed "${args[@]}" \
           --save "$tmp/ddp$n.safetensors" 2>&1)
    rcn=$?
    local l1 ln m1 mn a1 an
    l1=$(step_loss "$one"); ln=$(step_loss "$many")
    m1=$(field loss "$one"); mn=$(field loss "$many")
    a1=$(field accuracy "$one"); an=$(field accuracy "$many")
    echo "1 process, batch $batch: exit $rc1, loss after step $STEPS $l1, epoch mean $m1, accuracy $a1"
    echo "$n ranks, global batch $batch: exit $rcn, loss after step $STEPS $ln, epoch mean $mn, accuracy $an"
    if [ $rc1 != 0 ] || [ $rcn != 0 ]; then
        echo "FAIL: $n ranks: exit $rcn (one process: $rc1)"
        echo "$many" | tail -8
        fail=1
        return
    fi
    if ! close "$ln" "$l1" || ! close "$mn" "$m1"; then
        echo "FAIL: $n ranks: the loss after $STEPS steps ($ln, mean $mn) is not one process's" \
             "($l1, mean $m1) within $REL_TOL relative"
        fail=1
    fi
    local finals
    finals=$(echo "$many" | grep -c '^final: ')
    if [ "$finals" != 1 ]; then
        echo "FAIL: $n ranks: $finals 'final:' lines (rank 0 alone prints)"
        fail=1
    fi
    local ev
    ev=$("$bin" --device cpu --model mlp --load "$tmp/ddp$n.safetensors" --eval --test-limit 1000 2>&1)
    if [ "$(field accuracy "$ev")" != "$an" ]; then
        echo "FAIL: $n ranks: the saved model evaluates to accuracy '$(field accuracy "$ev")'," \
             "the run said '$an'"
        echo "$ev" | tail -3
        fail=1
    fi
}

compare 2 64
compare 3 66

# a global batch that the ranks cannot share equally
out=$("$mpiexec" "${xenv[@]}" "$npflag" 2 "$bin" --distributed --device cpu --batch 63 --limit 630 2>&1)
rc=$?
if [ $rc != 2 ] || ! echo "$out" | grep -q 'must be a multiple of the number of ranks'; then
    echo "FAIL: --batch 63 over 2 ranks: exit $rc (want 2), output: $(echo "$out" | tail -3)"
    fail=1
else
    echo "--batch 63 over 2 ranks: exit 2 ($(echo "$out" | grep -m1 'must be a multiple'))"
fi
exit $fail
