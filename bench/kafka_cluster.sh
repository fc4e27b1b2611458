#!/usr/bin/env bash
# Runs Apache Kafka as a three-node KRaft cluster on this machine (each
# node a broker and a controller, as bench/cluster.sh runs weir), on the
# loopback addresses 127.0.0.21-23, through bench/kafka.sh; and stops it.
#
#   bench/kafka_cluster.sh start --dir /tmp/kafka-cluster [--port 9600]
#                                [--mode default|durable] [--heap 1G]
#   bench/kafka_cluster.sh stop --dir /tmp/kafka-cluster
#
# Node N listens on 127.0.0.2N:PORT (clients) and :PORT+1 (controller);
# its files are under DIR/nodeN (see bench/kafka.sh), the Maven download
# is shared in DIR/maven. Topics, and Kafka's internal ones, get three
# replicas with min.insync.replicas 2. `start` prints the bootstrap list
# once every node answers.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cmd=${1:?start or stop}
shift
dir="" port=9600 mode=default heap=1G
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --mode) mode=$2; shift 2 ;;
    --heap) heap=$2; shift 2 ;;
    *) echo "kafka_cluster.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$dir" ] || { echo "kafka_cluster.sh: --dir is required" >&2; exit 2; }
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
host() { echo "127.0.0.2$1"; }

case "$cmd" in
start)
  # One download for the three nodes, before they start side by side.
  "$here/kafka.sh" classpath --dir "$dir/node1" --maven "$dir/maven" > /dev/null
  # One cluster id for all (kept, so a restart finds its formatted dirs).
  if [ ! -s "$dir/cluster.id" ]; then
    java -cp "$(cat "$dir/maven/classpath.txt")" kafka.tools.StorageTool random-uuid 2>/dev/null \
      | tail -n 1 > "$dir/cluster.id"
  fi
  voters=""
  for n in 1 2 3; do voters+="${voters:+,}$n@$(host "$n"):$((port + 1))"; done
  # Each start waits for its node to answer Metadata, which needs the
  # quorum: the three start together.
  pids=()
  for n in 1 2 3; do
    "$here/kafka.sh" start --dir "$dir/node$n" --maven "$dir/maven" --host "$(host "$n")" \
      --port "$port" --controller-port "$((port + 1))" --node-id "$n" --voters "$voters" \
      --cluster-id "$(cat "$dir/cluster.id")" --mode "$mode" --heap "$heap" > /dev/null &
    pids+=($!)
  done
  failed=0
  for p in "${pids[@]}"; do wait "$p" || failed=1; done
  if [ "$failed" = 1 ]; then
    "$0" stop --dir "$dir" 2>/dev/null || true
    echo "kafka_cluster.sh: a node did not start (see $dir/node*/kafka.log)" >&2
    exit 1
  fi
  echo "$(host 1):$port,$(host 2):$port,$(host 3):$port"
  ;;
stop)
  for n in 1 2 3; do
    "$here/kafka.sh" stop --dir "$dir/node$n" 2>/dev/null &
  done
  wait
  ;;
*) echo "kafka_cluster.sh: start or stop" >&2; exit 2 ;;
esac
