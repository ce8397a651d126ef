#!/usr/bin/env bash
# test_ember_graph.sh EMBER_GRAPH CAPTURE_MLP — the ember-graph command line end to end: the
# captured MLP training step that examples/capture_mlp saves is summarized (its inputs, output,
# named state, kernel calls by op family, parameter bytes) and drawn (--dot, a digraph that
# Graphviz's dot renders when it is installed); bad flags exit 2 and a file that cannot be
# loaded (missing, truncated, not a graph, tampered metadata) exits 1, each with one line
# on stderr that starts with "ember-graph: " and says why.
set -u
graph=$1 capture=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
err() { echo "FAIL: $*"; fail=1; }

(cd "$tmp" && "$capture" g.safetensors g.dot >/dev/null) || { echo "FAIL: capture_mlp"; exit 1; }

# the summary, by default and with --summary: the same text
out=$("$graph" "$tmp/g.safetensors") || err "ember-graph FILE: exit $?"
out2=$("$graph" "$tmp/g.safetensors" --summary) || err "ember-graph FILE --summary: exit $?"
[ "$out" = "$out2" ] || err "the default output differs from --summary's"
for want in '^graph: 2 inputs, 1 output, 4 named state tensors' \
            '^  x +f32 +\[16, 8\]' '^  labels +i64 +\[16\]' '^  loss +f32 +\[\]' \
            '^  fc1.weight +f32 +\[8, 16\]' '^  matmul +0 +0 +5 ' \
            '^  parameters \(state\) +212 elements in 4 buffers, 848 B'; do
    grep -Eq "$want" <<<"$out" || err "the summary lacks /$want/:"$'\n'"$out"
done

# --dot alone writes the digraph and no summary; with --summary, both
out=$("$graph" "$tmp/g.safetensors" --dot "$tmp/step.dot") || err "--dot: exit $?"
[ -z "$out" ] || err "--dot alone printed: $out"
head -n 5 "$tmp/step.dot" | grep -q '^digraph' || err "step.dot is not a digraph"
grep -q 'matmul' "$tmp/step.dot" || err "step.dot names no matmul node"
out=$("$graph" "$tmp/g.safetensors" --summary --dot "$tmp/both.dot") || err "--summary --dot"
grep -q '^graph: ' <<<"$out" && [ -s "$tmp/both.dot" ] || err "--summary --dot: not both"
if command -v dot >/dev/null; then
    dot -Tsvg "$tmp/step.dot" -o "$tmp/step.svg" 2>"$tmp/dot.err" && grep -q '<svg' "$tmp/step.svg" ||
        err "dot cannot render step.dot: $(cat "$tmp/dot.err")"
else
    echo "note: graphviz's dot is not installed: rendering not checked"
fi

# expect RC ARGS...: exit status RC and one 'ember-graph: ' line on stderr
expect() {
    local rc=$1
    shift
    "$graph" "$@" >/dev/null 2>"$tmp/err"
    local got=$?
    if [ "$got" != "$rc" ] || ! grep -q '^ember-graph: ' "$tmp/err"; then
        err "ember-graph $*: exit $got (want $rc), stderr: $(cat "$tmp/err")"
    fi
}
expect 2
expect 2 "$tmp/g.safetensors" --bogus
expect 2 "$tmp/g.safetensors" --dot
expect 1 "$tmp/missing.safetensors"
head -c 300 "$tmp/g.safetensors" >"$tmp/trunc.safetensors"
expect 1 "$tmp/trunc.safetensors"
printf 'not a safetensors file at all' >"$tmp/junk.safetensors"
expect 1 "$tmp/junk.safetensors"
# the format version in the metadata raised past what this build reads (same length: the
# header's size stays right), and the graph's JSON tampered with
perl -0777 -pe 's/"ember\.graph\.version":"1"/"ember.graph.version":"9"/' "$tmp/g.safetensors" \
    >"$tmp/newer.safetensors"
if cmp -s "$tmp/g.safetensors" "$tmp/newer.safetensors"; then
    err "the saved graph has no ember.graph.version \"1\" to tamper with"
else
    expect 1 "$tmp/newer.safetensors"
    grep -q 'newer' "$tmp/err" || err "a newer version: the message does not say so: $(cat "$tmp/err")"
fi
perl -0777 -pe 's/\\"bytes\\":512/\\"bytez\\":512/' "$tmp/g.safetensors" >"$tmp/tamper.safetensors"
if cmp -s "$tmp/g.safetensors" "$tmp/tamper.safetensors"; then
    err "the saved graph has no buffer of 512 bytes to tamper with"
else
    expect 1 "$tmp/tamper.safetensors"
fi
expect 1 "$tmp/g.safetensors" --dot "$tmp/no/such/dir/x.dot"

[ "$fail" = 0 ] && echo "ember-graph: all checks passed"
exit "$fail"
