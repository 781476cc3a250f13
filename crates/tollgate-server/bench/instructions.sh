#!/bin/bash
# Instructions the service executes per request, /healthz and /v1/check (memory store, the
# shipped example config, the check of docs/benchmarks.md's "Service (HTTP)"), counted by
# callgrind. Unlike requests per second on this shared 2-core host, the count is the same
# from run to run whatever else the machine does (±0.5 % here), so two builds compare on one
# run each. It counts the service's own instructions only: not the kernel's, nor wrk's.
# The service runs under callgrind (about 50× slower); wrk warms each route for 2 s, then the
# counters are zeroed and wrk sends for 8 s on 2 connections; the route's total ÷ its requests
# is printed.
# Needs: valgrind, wrk, a release build (cargo build --release -p tollgate-server).
# Usage: crates/tollgate-server/bench/instructions.sh [binary...]   (from the repository root;
# default target/release/tollgate; several binaries are measured one after the other)
set -euo pipefail
PORT=18091
WORK=$(mktemp -d)
trap 'kill ${SPID:-} 2>/dev/null; rm -rf "$WORK"' EXIT
CHECK="$(dirname "$0")/check.lua"
# Requests wrk sent in its run ($1: wrk's output).
sent() { awk '/requests in/ {print $1}' <<<"$1"; }
for bin in "${@:-target/release/tollgate}"; do
  rm -f "$WORK"/cg.out*
  TOLLGATE_HTTP=127.0.0.1:$PORT TOLLGATE_GRPC=127.0.0.1:$((PORT + 1)) valgrind --tool=callgrind \
    --callgrind-out-file="$WORK/cg.out" "$bin" serve --config examples/tollgate.toml \
    >"$WORK/serve.log" 2>&1 &
  SPID=$!
  for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$PORT/healthz" && break; sleep 0.3; done
  wrk -t1 -c2 -d2s "http://127.0.0.1:$PORT/healthz" >/dev/null
  wrk -t1 -c2 -d2s -s "$CHECK" "http://127.0.0.1:$PORT/v1/check" >/dev/null
  callgrind_control -z "$SPID" >/dev/null 2>&1
  h=$(sent "$(wrk -t1 -c2 -d8s "http://127.0.0.1:$PORT/healthz")")
  callgrind_control -d healthz "$SPID" >/dev/null 2>&1
  callgrind_control -z "$SPID" >/dev/null 2>&1
  c=$(sent "$(wrk -t1 -c2 -d8s -s "$CHECK" "http://127.0.0.1:$PORT/v1/check")")
  callgrind_control -d check "$SPID" >/dev/null 2>&1
  kill -TERM "$SPID"; wait "$SPID" 2>/dev/null || true
  hi=$(awk '/^totals:/ {print $2}' "$WORK/cg.out.1")
  ci=$(awk '/^totals:/ {print $2}' "$WORK/cg.out.2")
  awk -v b="$bin" -v hi="$hi" -v h="$h" -v ci="$ci" -v c="$c" 'BEGIN {
    printf "%s: /healthz %.0f instructions/request (%d requests), /v1/check %.0f (%d), check − healthz %.0f\n",
      b, hi / h, h, ci / c, c, ci / c - hi / h }'
done
