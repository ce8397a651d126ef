#!/usr/bin/env bash
# test_cli.sh EMBER_SERVER EMBER_TRAIN — ember-server's command line (bad flags and token files
# exit 2 with a message; it starts, prints its port and stops on SIGTERM with status 0), and
# `ember-train --device remote:127.0.0.1:PORT` trains on a server hosting cpu (skipped
# without Fashion-MNIST).
set -u
server=$1 train=${2:-}
tmp=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
fail=0
umask 077
printf 'tok\n' >"$tmp/token"
: >"$tmp/empty"
for bad in "" "--token-file $tmp/empty" "--token-file /nonexistent" \
           "--token-file $tmp/token --device nope" "--token-file $tmp/token --max-clients 0" \
           "--token-file $tmp/token --max-bytes 12Q" "--token-file $tmp/token --bogus 1" \
           "--token-file $tmp/token --max-pending 0" "--token-file $tmp/token --max-total-bytes 1X" \
           "--token-file $tmp/token --handshake-timeout 0" \
           "--token-file $tmp/token --listen 256.1.1.1:1" "--token-file $tmp/token --listen x:99999"; do
    # shellcheck disable=SC2086
    timeout 10 "$server" $bad >/dev/null 2>"$tmp/err"
    rc=$?
    if [ $rc != 2 ] || ! grep -q '^ember-server: ' "$tmp/err"; then
        echo "FAIL: ember-server $bad: exit $rc (want 2): $(cat "$tmp/err")"
        fail=1
    fi
done
"$server" --listen 127.0.0.1:0 --device cpu --token-file "$tmp/token" >"$tmp/out" 2>&1 &
pid=$!
port=
for _ in $(seq 1 100); do
    port=$(sed -n 's/^ember-server: listening on 127\.0\.0\.1:\([0-9]*\) device cpu$/\1/p' "$tmp/out")
    [ -n "$port" ] && break
    sleep 0.05
done
if [ -z "$port" ]; then
    echo "FAIL: ember-server did not print its port: $(cat "$tmp/out")"
    exit 1
fi
if [ -n "$train" ]; then
    dir=${EMBER_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
    if [ -r "$dir/train-images-idx3-ubyte.gz" ]; then
        out=$(EMBER_REMOTE_TOKEN_FILE=$tmp/token "$train" --device "remote:127.0.0.1:$port" \
              --limit 1000 --epochs 2 --batch 50 --seed 1 --test-limit 1000 2>&1)
        rc=$?
        line=$(echo "$out" | grep '^final: ' | tail -1)
        loss=$(echo "$line" | sed -n 's/.*loss=\([^ ]*\).*/\1/p')
        echo "ember-train on remote: exit $rc, $line"
        if [ $rc != 0 ] || [ -z "$loss" ] || ! awk -v l="$loss" 'BEGIN{exit !(l < 1.4)}'; then
            echo "FAIL: ember-train on remote"; echo "$out" | tail -5; fail=1
        fi
        # a wrong token: exit 2 with the reason
        printf 'other\n' >"$tmp/wrong"
        EMBER_REMOTE_TOKEN_FILE=$tmp/wrong "$train" --device "remote:127.0.0.1:$port" --limit 10 \
            >/dev/null 2>"$tmp/err"
        rc=$?
        if [ $rc != 2 ] || ! grep -q 'refused the token' "$tmp/err"; then
            echo "FAIL: ember-train with a wrong token: exit $rc: $(cat "$tmp/err")"; fail=1
        fi
    else
        echo "ember-train on remote: skipped (no Fashion-MNIST in $dir)"
    fi
fi
kill -TERM "$pid"
wait "$pid"
rc=$?
pid=
if [ $rc != 0 ]; then
    echo "FAIL: ember-server exit $rc after SIGTERM"; fail=1
fi
exit $fail
