#!/bin/bash
# Redis's instructions per GCRA decision, counted by callgrind (repeatable, unlike CPU time on a
# shared machine): the single-entry script before the local tier (examples/bench/before_gcra.lua),
# today's single-entry script (lua/one_gcra.lua + lua/gcra.lua) and today's coalesced batch
# (lua/batch_gcra.lua after the body), composed as src/script.rs composes them.
#
# Each runs under `valgrind --tool=callgrind redis-server`, driven by `redis-benchmark` with
# EVALSHA on random keys of 2000 (quota 1000/s, burst 1000: T = 1 ms, whole), 2000 calls to
# warm up, then 1000 counted (`callgrind_control -z`, then `-d`). Per decision = instructions
# of the counted part ÷ decisions, everything redis-server does included (reading, parsing,
# answering; not the kernel's part).
#
# One change to the scripts, and only for this count: the second of slack after a key's state
# (999 ms, 1000 ms before the issue) becomes 100 s. valgrind runs Redis ~50× slower, so with
# the real slack keys would expire between calls, which they do not at full speed in
# `cargo run --release -p tollgate-redis --example bench` (10 000 keys at ~400 000
# decisions/s); with it, each call finds its key full but present, as there.
#
# Needs: valgrind, redis-server, redis-benchmark, redis-cli.
# Usage: crates/tollgate-redis/bench/callgrind.sh [batch sizes...]   (default: 11 22 64;
#        11 is the mean batch at 256 tasks in the bench)
set -euo pipefail
cd "$(dirname "$0")/.."
SIZES=${*:-11 22 64}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
slack() { sed -e "s/redis.call('PTTL', key) - 1000$/redis.call('PTTL', key) - 100000/" \
  -e "s/string.format('%d', ms + 1000))$/string.format('%d', ms + 100000))/" \
  -e "s/pttl - 999$/pttl - 99999/" -e "s/string.format('%d', ms + 999))$/string.format('%d', ms + 99999))/" \
  -e "s/string.format('%d', ms + 999) end$/string.format('%d', ms + 99999) end/"; }
slack < examples/bench/before_gcra.lua > "$WORK/before.lua"
cat lua/one_gcra.lua lua/gcra.lua | slack > "$WORK/one.lua"
{ printf 'local last_ms, last_px\nlocal function gcra(key, inc, tau, op, now, whole)\n'; slack < lua/gcra.lua; printf 'end\n'; cat lua/batch_gcra.lua; } > "$WORK/batch.lua"
# Each slack must have been replaced twice (read and write), or the count means nothing.
for f in before one batch; do
  n=$(grep -c "100000\|99999" "$WORK/$f.lua")
  [ "$n" -ge 2 ] || { echo "callgrind.sh: the slack of $f.lua was not found ($n)" >&2; exit 1; }
done

# instructions per decision: script, keys per call, then ARGV
count() {
  local script=$1 k=$2; shift 2
  local port=$((20000 + RANDOM % 5000)) out="$WORK/cg.out"
  valgrind --tool=callgrind --callgrind-out-file="$out" redis-server --port $port --save "" \
    --appendonly no --logfile "$WORK/redis.log" >/dev/null 2>&1 &
  local vp=$!
  for _ in $(seq 150); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.2; done
  local sha keys=""
  sha=$(redis-cli -p $port script load "$(cat "$script")")
  for _ in $(seq "$k"); do keys="$keys k:{__rand_int__}"; done
  # shellcheck disable=SC2086
  redis-benchmark -p $port -c 1 -n 2000 -r 2000 -q EVALSHA "$sha" "$k" $keys "$@" >/dev/null
  callgrind_control -z $vp >/dev/null 2>&1
  # shellcheck disable=SC2086
  redis-benchmark -p $port -c 1 -n 1000 -r 2000 -q EVALSHA "$sha" "$k" $keys "$@" >/dev/null
  callgrind_control -d $vp >/dev/null 2>&1
  local errors
  errors=$(redis-cli -p $port info stats | awk -F: '/^total_error_replies/ {print $2+0}')
  kill $vp; wait $vp 2>/dev/null || true
  [ "$errors" -eq 0 ] || { echo "callgrind.sh: $script answered $errors errors" >&2; exit 1; }
  local total
  total=$(grep -h '^summary:' "$out.1" | awk '{print $2}')
  rm -f "$out"*
  echo $((total / (1000 * k)))
}
before=$(count "$WORK/before.lua" 1 1000 1000000)
one=$(count "$WORK/one.lua" 1 1000 1000000 1)
echo "| script | instructions per decision | ÷ before |"
echo "|---|---:|---:|"
echo "| before the local tier, single-entry | $before | 1.00× |"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
echo "| today, single-entry | $one | $(ratio "$one" "$before")× |"
for k in $SIZES; do
  b=$(count "$WORK/batch.lua" "$k" '' "$k" 1000 1000000 1)
  echo "| today, batch of $k | $b | $(ratio "$b" "$before")× |"
done
