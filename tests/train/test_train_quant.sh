#!/usr/bin/env bash
# test_train_quant.sh EMBER_TRAIN — ember-train --quantize end to end (issue 17), quick runs on
# cpu: the MLP trained on 2000 Fashion-MNIST images and saved; then --load --eval with
# --quantize q8, q4_0 and q4 (Q4_1) must quantize the three linear weights (the 784-input one
# with its blocks along its outputs) and evaluate within BOUND of the float model's
# accuracy on the first 2000 test images; a model saved after --quantize must load back into the
# float-built model and evaluate the same; a bad --quantize value exits 2. Exits 77 (ctest
# SKIP_RETURN_CODE) without the data set.
set -u
bin=$1
BOUND=0.03
dir=${EMBER_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
fail=0
for bad in "--quantize" "--quantize q5" "--quantize Q8"; do
    # shellcheck disable=SC2086
    out=$("$bin" $bad 2>&1 >/dev/null)
    rc=$?
    if [ "$rc" != 2 ] || ! echo "$out" | grep -q '^ember-train: '; then
        echo "FAIL: ember-train $bad: exit $rc (want 2), stderr: $out"
        fail=1
    fi
done
if [ ! -r "$dir/train-images-idx3-ubyte.gz" ] || [ ! -r "$dir/t10k-images-idx3-ubyte.gz" ]; then
    echo "skipping: Fashion-MNIST not found in $dir (apt-get install dataset-fashion-mnist)"
    [ $fail = 0 ] && exit 77 || exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common="--device cpu --test-limit 2000 --seed 1"
accuracy() { sed -n 's/^final: .* accuracy=\([^ ]*\).*/\1/p' | tail -1; }
out=$("$bin" $common --limit 2000 --epochs 1 --batch 50 --save "$tmp/f.safetensors" 2>&1)
float=$(echo "$out" | accuracy)
echo "float: $float"
if [ -z "$float" ]; then
    echo "FAIL: training: $(echo "$out" | tail -3)"
    exit 1
fi
for q in q8 q4_0 q4; do
    out=$("$bin" $common --load "$tmp/f.safetensors" --eval --quantize $q \
          --save "$tmp/$q.safetensors" 2>&1)
    rc=$?
    acc=$(echo "$out" | accuracy)
    line=$(echo "$out" | grep '^quantized: ')
    echo "$q: exit $rc, accuracy $acc; $line"
    if [ $rc != 0 ] || [ -z "$acc" ] ||
       ! awk -v a="$acc" -v f="$float" -v b="$BOUND" 'BEGIN{exit !(a > f - b)}'; then
        echo "FAIL: $q: exit $rc, accuracy '$acc' not within $BOUND of the float model's $float"
        echo "$out" | tail -3
        fail=1
        continue
    fi
    if ! echo "$line" | grep -q '3 weight tensors, 234752 of 235146 parameters'; then
        echo "FAIL: $q: the quantized line: '$line'"
        fail=1
    fi
    # the quantized file loads into the float-built model and evaluates the same
    out=$("$bin" $common --load "$tmp/$q.safetensors" --eval 2>&1)
    acc2=$(echo "$out" | accuracy)
    if [ "$acc2" != "$acc" ]; then
        echo "FAIL: $q: the saved quantized model evaluates to '$acc2', not $acc"
        echo "$out" | tail -3
        fail=1
    fi
done
exit $fail
