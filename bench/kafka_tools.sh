#!/usr/bin/env bash
# Drives two brokers alternately (A, B, A, B, ...) with Apache Kafka's own
# benchmark tools, so a comparison does not rest on weir-bench alone, and
# prints B/A per pair and the median.
#
#   bench/kafka_tools.sh A_ADDR B_ADDR PAIRS producer [RECORDS [SIZE [PARTITIONS]]]
#   bench/kafka_tools.sh A_ADDR B_ADDR PAIRS e2e [MESSAGES [SIZE]]
#
# producer  org.apache.kafka.tools.ProducerPerformance: RECORDS (1000000)
#           records of SIZE (1024) bytes, acks=all, as fast as it goes,
#           into a new topic of PARTITIONS (4) partitions; prints MB/s and
#           its p99 / p99.9 send-to-ack latency.
# e2e       org.apache.kafka.tools.EndToEndLatency: MESSAGES (10000)
#           messages of SIZE (1024) bytes, acks=all, one at a time: each is
#           sent, acknowledged and received by a polling consumer before
#           the next; prints its p50 / p99 / p99.9 round trip.
#
# PRODUCER_PROPS="k=v ..." adds producer settings to ProducerPerformance's
# (its defaults are the Java client's: batch.size 16384, linger.ms 5).
#
# Each run uses a topic of its own (created before, deleted after, with
# Kafka's TopicCommand). A_PID= / B_PID= (the brokers' processes) add each
# run's broker CPU seconds and their median ratio.
#
# The tools come from Maven Central through bench/kafka.sh (its classpath;
# KAFKA_DIR, default /tmp/kafka, is the directory given to kafka.sh, and
# KAFKA_MAVEN its --maven if one was).
set -euo pipefail
a=$1 b=$2 pairs=$3 tool=$4
shift 4
here=$(dirname "$0")
kafka_args=(--dir "${KAFKA_DIR:-/tmp/kafka}")
[ -n "${KAFKA_MAVEN:-}" ] && kafka_args+=(--maven "$KAFKA_MAVEN")
cp=$("$here/kafka.sh" classpath "${kafka_args[@]}")
tick=$(getconf CLK_TCK)
cpu_ticks() { # pid: user + system ticks so far, or - without a pid
  if [ -n "$1" ]; then awk '{print $14 + $15}' "/proc/$1/stat"; else echo -; fi
}
topics() { # addr create|delete topic [partitions]
  local args=(--bootstrap-server "$1" "--$2" --topic "$3")
  [ "$2" = create ] && args+=(--partitions "$4" --replication-factor 1)
  java -cp "$cp" org.apache.kafka.tools.TopicCommand "${args[@]}" > /dev/null
}
run() { # addr topic pid: prints "figure1 figure2 figure3 cpu"
  local out c0 c1
  case "$tool" in
    producer)
      topics "$1" create "$2" "${partitions}"
      c0=$(cpu_ticks "$3")
      # The last line is the summary: "N records sent, R records/sec
      # (M MB/sec), A ms avg latency, X ms max latency, p50 ms 50th, p95 ms
      # 95th, p99 ms 99th, p999 ms 99.9th."
      out=$(java -cp "$cp" org.apache.kafka.tools.ProducerPerformance --topic "$2" \
        --num-records "$records" --record-size "$size" --throughput -1 \
        --producer-props bootstrap.servers="$1" acks=all ${PRODUCER_PROPS:-} 2>/dev/null | tail -n 1)
      c1=$(cpu_ticks "$3")
      python3 -c '
import re, sys
line = sys.argv[1]
mb = re.search(r"\(([\d.]+) MB/sec\)", line).group(1)
p99 = re.search(r"([\d.]+) ms 99th", line).group(1)
p999 = re.search(r"([\d.]+) ms 99.9th", line).group(1)
print(mb, p99, p999)' "$out" ;;
    e2e)
      topics "$1" create "$2" 1
      c0=$(cpu_ticks "$3")
      # "Percentiles: 50th = A, 99th = B, 99.9th = C" (ms)
      out=$(java -cp "$cp" org.apache.kafka.tools.EndToEndLatency "$1" "$2" "$records" all "$size" 2>/dev/null \
        | grep '^Percentiles')
      c1=$(cpu_ticks "$3")
      python3 -c '
import re, sys
m = re.search(r"50th = ([\d.]+), 99th = ([\d.]+), 99.9th = ([\d.]+)", sys.argv[1])
print(*m.groups())' "$out" ;;
    *) echo "kafka_tools.sh: producer or e2e, not $tool" >&2; exit 2 ;;
  esac
  topics "$1" delete "$2"
  if [ "$c0" = - ]; then echo -; else python3 -c "print(f'{($c1 - $c0) / $tick:.2f}')"; fi
}
case "$tool" in
  producer) records=${1:-1000000} size=${2:-1024} partitions=${3:-4}; labels="MB/s p99_ms p99.9_ms" ;;
  e2e) records=${1:-10000} size=${2:-1024}; labels="p50_ms p99_ms p99.9_ms" ;;
  *) echo "kafka_tools.sh: producer or e2e, not $tool" >&2; exit 2 ;;
esac
rows=()
stamp=$(date +%s)
for ((p = 1; p <= pairs; p++)); do
  ra=$(run "$a" "tools-$stamp-a$p" "${A_PID:-}" | paste -sd ' ')
  rb=$(run "$b" "tools-$stamp-b$p" "${B_PID:-}" | paste -sd ' ')
  echo "pair $p ($labels cpu_s): A $ra | B $rb"
  rows+=("$ra $rb")
done
printf '%s\n' "${rows[@]}" | python3 -c '
import statistics, sys
labels = sys.argv[1].split() + ["cpu"]
rows = [l.split() for l in sys.stdin if l.strip()]
n = len(labels)
out = []
for i, name in enumerate(labels):
    r = [float(x[n + i]) / float(x[i]) for x in rows if x[i] not in ("-", "0", "0.00") and x[n + i] != "-"]
    if r:
        out.append(f"{name} {statistics.median(r):.2f}")
print("median B/A: " + ", ".join(out))' "$labels"
