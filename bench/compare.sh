#!/usr/bin/env bash
# Runs the same weir-bench workload against two brokers alternately
# (A, B, A, B, ...) on one machine and prints B/A per pair for MB/s,
# messages/s, p99 and p99.9 latency (and for e2e both wake p99s), then the
# median of each ratio.
#
#   bench/compare.sh A_ADDR B_ADDR PAIRS WORKLOAD [workload args...]
#   bench/compare.sh 127.0.0.1:9093 127.0.0.1:9092 3 produce --topic t --create-topic \
#       --messages 1000000 --size 1024 --acks all
#
# Optional, per side (A_... and B_...):
#   A_PID=PID      the broker's process (a cluster's: PID,PID,PID): its CPU
#                  seconds during each run are printed (user + system,
#                  from /proc/PID/stat, summed), and their median ratio;
#   A_STATS=ADDR   a weir node's HTTP address: passed as --node-stats, so
#                  the node's own produce p99 is printed beside the client's.
#   A_ARGS="..."   more workload arguments for this side only (split on
#                  spaces), e.g. its client's -X security.protocol=SASL_SSL.
#
# Each pair also prints the CPU steal during each run (/proc/stat): on a VM
# the host's load moves latency tails by several times, so compare tails
# only from runs with little steal.
#
# The topic name gets a suffix per run so every run starts the same way.
# Each produce run's bytes stay on a storing broker: add --delete-topic to
# the workload's arguments, or a long series fills the disk (2 GB a run).
set -euo pipefail
a=$1 b=$2 pairs=$3 workload=$4
shift 4
bin="$(dirname "$0")/../target/release/weir-bench"
args=("$@")
tick=$(getconf CLK_TCK)
cpu_ticks() { # pids (comma-separated): user + system ticks so far, or - without one
  [ -n "$1" ] || { echo -; return; }
  local p t=0
  for p in ${1//,/ }; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done
  echo "$t"
}
run() { # broker run-number pid stats-addr side-args
  local out topic_args=() i c0 c1 stats=() side=()
  for ((i = 0; i < ${#args[@]}; i++)); do
    if [ "${args[$i]}" = "--topic" ]; then
      topic_args+=(--topic "${args[$((i + 1))]}-$2"); i=$((i + 1))
    else
      topic_args+=("${args[$i]}")
    fi
  done
  [ -n "$4" ] && stats=(--node-stats "$4")
  [ -n "$5" ] && read -r -a side <<< "$5"
  c0=$(cpu_ticks "$3")
  s0=$(head -n 1 /proc/stat)
  out=$("$bin" "$workload" --brokers "$1" "${topic_args[@]}" "${stats[@]}" "${side[@]}" --json 2>/dev/null | tail -n 1)
  s1=$(head -n 1 /proc/stat)
  c1=$(cpu_ticks "$3")
  python3 -c '
import json, sys
r = json.loads(sys.argv[1])
c0, c1, tick = sys.argv[2], sys.argv[3], int(sys.argv[4])
cpu = "-" if c0 == "-" else "%.2f" % ((int(c1) - int(c0)) / tick)
node = r.get("node_us", {}).get("produce", {}).get("p99", "-")
# The share of the run the hypervisor kept this VM off its CPUs ("steal"
# in /proc/stat): tails measured while it is above ~1% are the host'"'"'s.
d = [int(b) - int(a) for a, b in zip(sys.argv[5].split()[1:9], sys.argv[6].split()[1:9])]
steal = "%.1f" % (100 * d[7] / max(1, sum(d)))
print(r["mb_per_sec"], r["msgs_per_sec"], r["latency_us"]["p99"], r["latency_us"]["p999"],
      r.get("wake_us", {}).get("p99", "-"), cpu, node, steal)' "$out" "$c0" "$c1" "$tick" "$s0" "$s1"
}
ratios=()
for ((p = 1; p <= pairs; p++)); do
  read -r amb amsg ap99 ap999 awake acpu anode asteal < <(run "$a" "a$p" "${A_PID:-}" "${A_STATS:-}" "${A_ARGS:-}")
  read -r bmb bmsg bp99 bp999 bwake bcpu bnode bsteal < <(run "$b" "b$p" "${B_PID:-}" "${B_STATS:-}" "${B_ARGS:-}")
  # nan where A has nothing to divide by (e2e against the null broker
  # receives no records, so it has no MB/s).
  r=$(python3 -c "d = lambda b, a: b / a if a else float('nan'); print(f'{d($bmb, $amb):.2f} {d($bmsg, $amsg):.2f} {d($bp99, $ap99):.2f} {d($bp999, $ap999):.2f}')")
  cpu=""
  if [ "$acpu" != "-" ] && [ "$bcpu" != "-" ]; then
    cpu=" $(python3 -c "print(f'{$bcpu / $acpu:.2f}' if $acpu else 'nan')")"
  fi
  extra=""
  [ "$awake" != "-" ] && extra+=" (e2e wake p99: A ${awake}us, B ${bwake}us)"
  [ "$acpu" != "-" ] || [ "$bcpu" != "-" ] && extra+=" (CPU s: A $acpu, B $bcpu)"
  [ "$anode" != "-" ] || [ "$bnode" != "-" ] && extra+=" (node produce p99: A ${anode}us, B ${bnode}us)"
  extra+=" (CPU steal: A ${asteal}%, B ${bsteal}%)"
  echo "pair $p: A $amb MB/s p99 ${ap99}us p99.9 ${ap999}us | B $bmb MB/s p99 ${bp99}us p99.9 ${bp999}us | B/A MB/s, msg/s, p99, p99.9: $r$extra"
  ratios+=("$r$cpu")
done
printf '%s\n' "${ratios[@]}" | python3 -c '
import statistics, sys
rows = [list(map(float, l.split())) for l in sys.stdin if l.strip()]
cols = [statistics.median(c) for c in zip(*rows)]
line = "median B/A: MB/s %.2f, msg/s %.2f, p99 latency %.2f, p99.9 latency %.2f" % tuple(cols[:4])
if len(cols) > 4:
    line += ", CPU %.2f" % cols[4]
print(line)'
