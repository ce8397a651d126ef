#!/usr/bin/env bash
# run_conformance.sh EMBER_SERVER CONFORMANCE GOLDEN DEVICE HOSTED
# Starts ember-server on a free loopback port hosting HOSTED (e.g. cpu), then runs the whole
# conformance table on DEVICE (remote, remote+autodiff, remote+autodiff:balanced) through
# `conformance --remote ADDR --token-file F --device DEVICE`, and stops the server.
# Exits with the conformance runner's status (1 if the server did not start).
set -u
server=$1 conformance=$2 golden=$3 device=$4 hosted=${5:-cpu}
tmp=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
umask 077
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/token"
"$server" --listen 127.0.0.1:0 --device "$hosted" --token-file "$tmp/token" >"$tmp/out" 2>"$tmp/err" &
pid=$!
port=
for _ in $(seq 1 100); do
    port=$(sed -n 's/^ember-server: listening on 127\.0\.0\.1:\([0-9]*\) .*/\1/p' "$tmp/out")
    [ -n "$port" ] && break
    sleep 0.05
done
if [ -z "$port" ]; then
    echo "ember-server did not start:"; cat "$tmp/err"
    exit 1
fi
"$conformance" "$golden" --remote "127.0.0.1:$port" --token-file "$tmp/token" --device "$device"
