#!/usr/bin/env bash
# Runs three weir nodes as one cluster on this machine, each on its own
# loopback address (127.0.0.21-23), one shard each, unpinned
# (`--cpus none`: three nodes share the cores), and stops them.
#
#   bench/cluster.sh start --dir /tmp/weir-cluster [--port 9500]
#   bench/cluster.sh stop --dir /tmp/weir-cluster
#
# Node N's Kafka port is PORT, its HTTP port PORT+1 and its peer port
# PORT+2, on 127.0.0.2N. `start` prints the bootstrap list once every node
# names three brokers, and each node's PID; logs go to DIR/nodeN.log.
# Topics for a replicated run are made with the workload's
# `--create-topic --replication-factor 3`.
set -euo pipefail
cmd=${1:?start or stop}
shift
dir="" port=9500
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$dir" ] || { echo "--dir is required" >&2; exit 2; }
bin="$(cd "$(dirname "$0")/.." && pwd)/target/release/weir"
host() { echo "127.0.0.2$1"; }

case "$cmd" in
start)
  mkdir -p "$dir"
  voters=""
  for n in 1 2 3; do voters+="${voters:+,}$n@$(host $n):$((port + 2))"; done
  for n in 1 2 3; do
    "$bin" serve "$dir/node$n" --kafka "$(host $n):$port" --addr "$(host $n):$((port + 1))" \
      --cores 1 --cpus none --node-id "$n" --voters "$voters" >"$dir/node$n.log" 2>&1 &
    echo $! >"$dir/node$n.pid"
  done
  bootstrap="$(host 1):$port,$(host 2):$port,$(host 3):$port"
  for _ in $(seq 1 120); do
    if python3 - "$port" <<'EOF' 2>/dev/null; then
import socket, struct, sys
port = int(sys.argv[1])
for n in (1, 2, 3):
    s = socket.create_connection((f"127.0.0.2{n}", port), timeout=2)
    s.sendall(struct.pack(">ihhih", 14, 3, 0, 1, 0) + struct.pack(">i", 0))
    size = struct.unpack(">i", s.recv(4))[0]
    body = b""
    while len(body) < size:
        body += s.recv(size - len(body))
    assert struct.unpack_from(">i", body, 4)[0] == 3  # brokers named
EOF
      echo "$bootstrap"
      for n in 1 2 3; do echo "node$n pid $(cat "$dir/node$n.pid")"; done
      exit 0
    fi
    sleep 0.5
  done
  echo "the cluster did not form within 60 s; see $dir/node*.log" >&2
  exit 1
  ;;
stop)
  for n in 1 2 3; do
    [ -f "$dir/node$n.pid" ] && kill "$(cat "$dir/node$n.pid")" 2>/dev/null || true
  done
  for n in 1 2 3; do
    pid=$(cat "$dir/node$n.pid" 2>/dev/null || echo)
    while [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
    rm -f "$dir/node$n.pid"
  done
  ;;
*) echo "start or stop" >&2; exit 2 ;;
esac
