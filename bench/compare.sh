#!/usr/bin/env bash
# Runs the same weir-bench workload against two brokers alternately
# (A, B, A, B, ...) on one machine and prints B/A per pair for MB/s,
# messages/s and p99 latency (and for e2e both wake p99s), then the median
# of each ratio.
#
#   bench/compare.sh A_ADDR B_ADDR PAIRS WORKLOAD [workload args...]
#   bench/compare.sh 127.0.0.1:9093 127.0.0.1:9092 3 produce --topic t --create-topic \
#       --messages 1000000 --size 1024 --acks all
#
# The topic name gets a suffix per run so every run starts the same way.
set -euo pipefail
a=$1 b=$2 pairs=$3 workload=$4
shift 4
bin="$(dirname "$0")/../target/release/weir-bench"
args=("$@")
run() { # broker run-number
  local out topic_args=() i
  for ((i = 0; i < ${#args[@]}; i++)); do
    if [ "${args[$i]}" = "--topic" ]; then
      topic_args+=(--topic "${args[$((i + 1))]}-$2"); i=$((i + 1))
    else
      topic_args+=("${args[$i]}")
    fi
  done
  out=$("$bin" "$workload" --brokers "$1" "${topic_args[@]}" --json 2>/dev/null | tail -n 1)
  python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print(r["mb_per_sec"], r["msgs_per_sec"], r["latency_us"]["p99"], r.get("wake_us", {}).get("p99", "-"))' "$out"
}
ratios=()
for ((p = 1; p <= pairs; p++)); do
  read -r amb amsg ap99 awake < <(run "$a" "a$p")
  read -r bmb bmsg bp99 bwake < <(run "$b" "b$p")
  r=$(python3 -c "print(f'{$bmb/$amb:.2f} {$bmsg/$amsg:.2f} {$bp99/max($ap99,1):.2f}')")
  wake=""
  [ "$awake" != "-" ] && wake=" (e2e wake p99: A ${awake}us, B ${bwake}us)"
  echo "pair $p: A $amb MB/s p99 ${ap99}us | B $bmb MB/s p99 ${bp99}us | B/A MB/s, msg/s, p99: $r$wake"
  ratios+=("$r")
done
printf '%s\n' "${ratios[@]}" | python3 -c '
import statistics, sys
rows = [list(map(float, l.split())) for l in sys.stdin if l.strip()]
cols = list(zip(*rows))
print("median B/A: MB/s %.2f, msg/s %.2f, p99 latency %.2f" % tuple(statistics.median(c) for c in cols))'
