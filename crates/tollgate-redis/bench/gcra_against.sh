#!/bin/bash
# Measures the single-entry GCRA script of the working tree against the same script at git
# revision REV, as in docs/benchmarks.md ("GCRA: a spent key without GET"): both loaded into one
# spawned redis-server, driven by `redis-benchmark -P 16 -c 50` in alternating rounds over
# KEYS keys (100: every call finds its key spent; 10000: full again between calls), quota
# 1000/s burst 1000 (inc = 1000 µs, tau = 1 000 000 µs). Reports Redis's CPU per call (utime +
# stime of the redis-server process, /proc) and calls/s, then the ratios new ÷ old.
# Needs: redis-server, redis-cli, redis-benchmark, git, bc.
# Usage: crates/tollgate-redis/bench/gcra_against.sh REV [rounds] [calls] [keys]  (from the root)
set -euo pipefail
REV=${1:?usage: gcra_against.sh REV [rounds] [calls] [keys]}
ROUNDS=${2:-3}
N=${3:-300000}
KEYS=${4:-100}
PORT=16399
WORK=$(mktemp -d)
trap 'kill $RPID 2>/dev/null; wait $RPID 2>/dev/null; rm -rf "$WORK"' EXIT
LUA=crates/tollgate-redis/lua
{ cat $LUA/one_gcra.lua; git show "$REV:$LUA/gcra.lua"; } > "$WORK/old.lua"
cat $LUA/one_gcra.lua $LUA/gcra.lua > "$WORK/new.lua"
redis-server --port $PORT --save "" --appendonly no --logfile "$WORK/redis.log" &
RPID=$!
for _ in $(seq 50); do redis-cli -p $PORT ping >/dev/null 2>&1 && break; sleep 0.1; done
old=$(redis-cli -p $PORT SCRIPT LOAD "$(cat "$WORK/old.lua")")
new=$(redis-cli -p $PORT SCRIPT LOAD "$(cat "$WORK/new.lua")")
cpu() { awk '{print $14 + $15}' /proc/$RPID/stat; }
declare -A cpu_sum rate_sum
for round in $(seq "$ROUNDS"); do
  for which in old new; do
    sha=$old; [ $which = new ] && sha=$new
    a=$(cpu); t0=$(date +%s.%N)
    redis-benchmark -p $PORT -n "$N" -P 16 -c 50 -r "$KEYS" -q \
      EVALSHA "$sha" 1 "g:{__rand_int__}" 1000 1000000 >/dev/null
    b=$(cpu); t1=$(date +%s.%N)
    c=$(echo "($b - $a) * 1000000 / $(getconf CLK_TCK) / $N" | bc -l)
    r=$(echo "$N / ($t1 - $t0)" | bc -l)
    printf '%s round %d: %.2f µs Redis CPU per call, %.0f calls/s\n' $which "$round" "$c" "$r"
    cpu_sum[$which]=$(echo "${cpu_sum[$which]:-0} + $c" | bc -l)
    rate_sum[$which]=$(echo "${rate_sum[$which]:-0} + $r" | bc -l)
  done
done
printf 'new ÷ old (means of %d rounds, %d keys): Redis CPU per call %.2f×, calls/s %.2f×\n' \
  "$ROUNDS" "$KEYS" "$(echo "${cpu_sum[new]} / ${cpu_sum[old]}" | bc -l)" \
  "$(echo "${rate_sum[new]} / ${rate_sum[old]}" | bc -l)"
