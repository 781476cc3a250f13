#!/bin/bash
# What a flood of status reads costs the checks, as in docs/benchmarks.md, "A flood of status
# reads": the memory store, 64 limits (each checked once, so that every one has its metrics),
# the status history sampled every second for FILL seconds; then, per round and per read
# route (/metrics, /v1/status, /v1/history), wrk's checks alone for 4 s and the same checks
# while a second wrk reads the route as fast as it can on 8 connections; then, while wrk
# checks again, 20 single reads of the route by curl, one after another. Prints checks/s
# alone and flooded, their ratio, the reads answered per second in the flood, and the median
# time of a single read during the checks (ms).
# With TOLLGATE_BEFORE=<binary>, each round runs that binary too, on the same config (the two
# taking turns to go first).
# Needs: a release build (cargo build --release -p tollgate-server --bin tollgate), wrk, curl.
# Usage: crates/tollgate-server/bench/watch_flood.sh [rounds] [FILL seconds]   (from the repository root)
set -euo pipefail
ROUNDS=${1:-3}
FILL=${2:-60}
BIN=target/release/tollgate
PORT=18082
WORK=$(mktemp -d)
trap 'kill ${SPID:-} 2>/dev/null; rm -rf "$WORK"' EXIT
CHECK="$(dirname "$0")/check.lua"
{
  printf '[server]\nhttp = "127.0.0.1:%s"\nhistory_interval = "1s"\n' $PORT
  printf '\n[[limits]]\nname = "sms"\nalgorithm = "fixed_window"\nlimit = 100\nperiod = "1m"\nkey = ["user"]\non_store_error = "allow"\n'
  for i in $(seq -w 1 63); do
    printf '\n[[limits]]\nname = "limit_%s_with_a_longer_name"\nalgorithm = "fixed_window"\nlimit = 1000\nperiod = "1m"\nkey = ["user"]\non_store_error = "allow"\n' "$i"
  done
} > "$WORK/t.toml"
rate() { awk '/Requests\/sec/ {printf "%d", $2}' "$1"; }
for round in $(seq "$ROUNDS"); do
  BINS="$BIN"
  if [ -n "${TOLLGATE_BEFORE:-}" ]; then
    if [ $((round % 2)) = 1 ]; then BINS="$TOLLGATE_BEFORE $BIN"; else BINS="$BIN $TOLLGATE_BEFORE"; fi
  fi
  for serve in $BINS; do
    $serve serve --config "$WORK/t.toml" 2>"$WORK/serve.log" &
    SPID=$!
    for _ in $(seq 50); do curl -sf http://127.0.0.1:$PORT/healthz >/dev/null && break; sleep 0.1; done
    for i in $(seq -w 1 63); do
      curl -s -o /dev/null -d "{\"limit\": \"limit_${i}_with_a_longer_name\", \"key\": {\"user\": \"$i\"}}" \
        http://127.0.0.1:$PORT/v1/check
    done
    sleep "$FILL"
    line="round=$round binary=$serve"
    for route in /metrics /v1/status /v1/history; do
      wrk -t1 -c32 -d4s -s "$CHECK" http://127.0.0.1:$PORT/v1/check > "$WORK/alone"
      wrk -t1 -c8 -d5s http://127.0.0.1:$PORT$route > "$WORK/reads" &
      WPID=$!
      sleep 0.5
      wrk -t1 -c32 -d4s -s "$CHECK" http://127.0.0.1:$PORT/v1/check > "$WORK/flooded"
      wait $WPID
      wrk -t1 -c32 -d4s -s "$CHECK" http://127.0.0.1:$PORT/v1/check > /dev/null &
      WPID=$!
      sleep 0.5
      one=$(for _ in $(seq 20); do curl -s -o /dev/null -w '%{time_total}\n' http://127.0.0.1:$PORT$route; done \
        | sort -g | awk '{ v[NR] = $1 } END { printf "%.2f", v[10] * 1000 }')
      wait $WPID
      a=$(rate "$WORK/alone"); f=$(rate "$WORK/flooded"); r=$(rate "$WORK/reads")
      line="$line | $route checks alone=$a flooded=$f ratio=$(awk -v f="$f" -v a="$a" 'BEGIN { printf "%.2f", f / a }') reads/s=$r read_ms=$one"
    done
    echo "$line"
    kill -TERM $SPID; wait $SPID || true
  done
done
