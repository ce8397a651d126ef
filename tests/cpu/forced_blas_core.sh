#!/usr/bin/env bash
# OPENBLAS_CORETYPE forcing a kernel that this CPU cannot run (SkylakeX without AVX-512,
# Haswell without AVX2) must not kill the process with SIGILL: ember-info warns, and the
# cpu backend's matmul and convolutions give the right numbers with ember's own GEMM.
# Arguments: ember-info, conformance, golden.txt. Exit status 77 (skipped) on a CPU that runs
# every x86 kernel of OpenBLAS (AVX-512), or off x86-64.
set -u
info=$1 conf=$2 golden=$3
[ "$(uname -m)" = x86_64 ] || { echo "not x86-64: skipped"; exit 77; }
best=$("$info" | sed -n 's/^cpu: isa .*the best this CPU supports: \([a-z0-9]*\).*/\1/p')
case "$best" in
    avx2) core=SkylakeX ;;
    portable) core=Haswell ;;
    *) echo "this CPU (${best:-?}) runs every OpenBLAS x86 kernel: skipped"; exit 77 ;;
esac
if ! OPENBLAS_CORETYPE=$core "$info" | grep -q "^cpu: warning: OpenBLAS was told to run its $core kernel"; then
    echo "forced_blas_core.sh: ember-info gives no warning for OPENBLAS_CORETYPE=$core on $best"
    exit 1
fi
for f in matmul conv; do
    OPENBLAS_CORETYPE=$core "$conf" "$golden" --device cpu --filter "$f" || {
        echo "forced_blas_core.sh: $f on cpu with OPENBLAS_CORETYPE=$core failed ($?)"; exit 1; }
done
echo "forced_blas_core.sh: OPENBLAS_CORETYPE=$core on an $best CPU: warned, matmul and conv right"
