#!/bin/bash
# Measures the service as in docs/benchmarks.md, "Service (HTTP)": for the memory store and a
# spawned Redis, three rounds of wrk on /healthz and on /v1/check, then `tollgate bench`.
# Within a round, wrk runs on the two routes in turn, PAIRS times each (4 s a run), and each
# route's median is kept: /healthz on this 2-core host runs in one of two modes (about 140k or
# 105k req/s, changing between runs), and one run of each would make the ratio a coin toss
# (docs/benchmarks.md, "The floor a POST sets").
# With TOLLGATE_BEFORE=<binary> (an earlier release, built from its commit, e.g.
# `git worktree add /tmp/before 0a539c4^ && (cd /tmp/before && CARGO_TARGET_DIR=/tmp/before-target
# cargo build --release -p tollgate-server)`), each round also runs that binary on the same
# config (the two taking turns to go first); its `tollgate bench` is skipped (an older binary
# may not have it), and the round ends with this binary's /v1/check ÷ that binary's.
# Needs: a release build with the default features (cargo build --release -p tollgate-server:
# `tollgate bench` is its `load` feature), wrk, redis-server.
# Usage: crates/tollgate-server/bench/service.sh [rounds] [pairs]   (from the repository root)
set -euo pipefail
ROUNDS=${1:-3}
PAIRS=${2:-3}
BIN=target/release/tollgate
CFG=examples/tollgate.toml
PORT=18081
REDIS_PORT=16399
WORK=$(mktemp -d)
trap 'kill $RPID ${SPID:-} 2>/dev/null; rm -rf "$WORK"' EXIT
CHECK="$(dirname "$0")/check.lua"
# The median of its arguments (the lower middle one for an even count).
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
redis-server --port $REDIS_PORT --save "" --appendonly no --logfile "$WORK/redis.log" &
RPID=$!
sleep 0.5
for round in $(seq "$ROUNDS"); do
  # The two binaries take turns going first, round by round.
  BINS="$BIN"
  if [ -n "${TOLLGATE_BEFORE:-}" ]; then
    if [ $((round % 2)) = 1 ]; then BINS="$TOLLGATE_BEFORE $BIN"; else BINS="$BIN $TOLLGATE_BEFORE"; fi
  fi
  for store in memory redis; do
    if [ $store = redis ]; then export TOLLGATE_REDIS_URL=redis://127.0.0.1:$REDIS_PORT; else unset TOLLGATE_REDIS_URL; fi
    for serve in $BINS; do
      TOLLGATE_HTTP=127.0.0.1:$PORT $serve serve --config $CFG 2>"$WORK/serve-$store.log" &
      SPID=$!
      sleep 1
      hs=(); ws=()
      for _ in $(seq "$PAIRS"); do
        hs+=("$(wrk -t2 -c64 -d4s http://127.0.0.1:$PORT/healthz | awk '/Requests\/sec/ {print $2}')")
        ws+=("$(wrk -t2 -c64 -d4s -s "$CHECK" http://127.0.0.1:$PORT/v1/check | awk '/Requests\/sec/ {print $2}')")
      done
      h=$(median "${hs[@]}"); w=$(median "${ws[@]}")
      b="(skipped)"
      [ "$serve" = "$BIN" ] && b=$($BIN bench --url http://127.0.0.1:$PORT -c 64 -d 10s -l sms | tr '\n' ' ')
      r=$(awk -v w="$w" -v h="$h" 'BEGIN { printf "%.2f", w / h }')
      echo "round=$round store=$store binary=$serve wrk_healthz=$h (runs: ${hs[*]}) wrk_check=$w (runs: ${ws[*]}) check/healthz=$r bench: $b"
      kill -TERM $SPID; wait $SPID || true
      if [ "$serve" = "$BIN" ]; then this_check=$w; else before_check=$w; fi
    done
    if [ -n "${TOLLGATE_BEFORE:-}" ]; then
      echo "round=$round store=$store check ÷ before's check: $(awk -v a="$this_check" -v b="$before_check" 'BEGIN { printf "%.2f", a / b }')×"
    fi
  done
done
