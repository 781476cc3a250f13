#!/bin/bash
# Time to first byte for new clients during a flood of silent sockets, as in
# docs/benchmarks.md, "Connection flood": the service on the default cap (4096), a flood of
# N sockets re-opened as fast as the server closes them (bench/flood/attack.py), and COUNT
# new clients one after another (bench/flood/client.py); then the kernel's listen-queue
# overflows (nstat) and the server's shed count.
# Needs: a release build (cargo build --release -p tollgate-server --bin tollgate), python3,
# nstat (iproute2), curl, and a file descriptor limit above N + 4096 (ulimit -n).
# Usage: crates/tollgate-server/bench/flood.sh [N] [COUNT] [ATTACKER_IP]   (from the repository root)
#   ATTACKER_IP: a loopback address of the flood's own (e.g. 127.0.0.2; clients use 127.0.0.1).
#   TOLLGATE_BIN: the binary to measure (default target/release/tollgate).
set -euo pipefail
N=${1:-6000}
COUNT=${2:-300}
SRC=${3:-}
BIN=${TOLLGATE_BIN:-target/release/tollgate}
HERE=$(dirname "$0")/flood
PORT=18481
WORK=$(mktemp -d)
trap 'kill ${SPID:-} ${APID:-} 2>/dev/null; rm -rf "$WORK"' EXIT
cat > "$WORK/t.toml" <<TOML
[server]
http = "127.0.0.1:$PORT"

[[limits]]
name = "h"
algorithm = "fixed_window"
limit = 1000000
period = "1h"
key = ["user"]
on_store_error = "allow"
TOML
$BIN serve --config "$WORK/t.toml" 2>"$WORK/serve.log" &
SPID=$!
sleep 1
nstat -n >/dev/null
python3 "$HERE/attack.py" 127.0.0.1:$PORT "$N" $((COUNT / 40 + 12)) $SRC &
APID=$!
sleep 5   # the flood fills the listener
python3 "$HERE/client.py" 127.0.0.1:$PORT "$COUNT"
wait $APID
nstat | grep -E "ListenOverflows|ListenDrops" || echo "TcpExtListenOverflows 0"
curl -s http://127.0.0.1:$PORT/metrics | grep -E '^tollgate_connections_shed_total'
