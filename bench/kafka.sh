#!/usr/bin/env bash
# Runs Apache Kafka as a single-node KRaft broker (broker and controller in
# one JVM), to measure weir against it with weir-bench or with Kafka's own
# tools. Kafka's jars come from Maven Central through Maven: nothing of Kafka
# is kept in this repository.
#
#   bench/kafka.sh start --port 9392 --dir /tmp/kafka [--mode default|durable]
#                        [--heap 1G] [--controller-port P] [--foreground]
#                        [--maven DIR] [--wait SECONDS]
#                        [--host H --node-id N --voters V --cluster-id ID]
#   bench/kafka.sh stop --dir /tmp/kafka
#   bench/kafka.sh classpath --dir /tmp/kafka [--maven DIR]
#
# Modes:
#   default  Kafka as shipped: an append is acknowledged once it is in the
#            page cache; the fsync is left to the OS (and to Kafka's
#            segment roll and shutdown).
#   durable  log.flush.interval.messages=1: every append is fsynced before
#            the produce is acknowledged, as weir does for acks=all.
#
# One node of a cluster (bench/kafka_cluster.sh starts three): --host is
# the address it listens on (default 127.0.0.1), --node-id its id,
# --voters the controller quorum (`1@host:port,2@host:port,...`, every node
# both broker and controller), --cluster-id the id all nodes are formatted
# with. With three or more voters the internal topics get three replicas
# and min.insync.replicas is 2 (topics' default too), Kafka's production
# advice; the rest stays at Kafka's defaults.
#
# Everything lives under --dir:
#   DIR/maven/         the pom this script writes, Maven's local repository
#                      (the download, ~70 MB) and classpath.txt;
#                      --maven DIR puts it elsewhere (so several data dirs
#                      share one download; DIR remembers it in
#                      DIR/maven.path)
#   DIR/data/          Kafka's log dir (rm -rf it to start from empty)
#   DIR/server.properties, DIR/log4j2.properties   written on every start
#   DIR/kafka.log      the broker's log (background runs)
#   DIR/kafka.pid      the broker's process id while it runs
#
# `start` waits until the broker answers a Metadata request that lists
# it, prints the PID and returns; with --foreground it stays attached and
# stops the broker on Ctrl-C. `classpath` prints a classpath for Kafka's
# own tools:
#
#   java -cp "$(bench/kafka.sh classpath --dir /tmp/kafka)" \
#       org.apache.kafka.tools.ProducerPerformance --topic t --num-records 200000 \
#       --record-size 1024 --throughput -1 --producer-props bootstrap.servers=127.0.0.1:9392 acks=all
set -euo pipefail

KAFKA_VERSION=4.1.2
SCALA_VERSION=2.13
# Kafka 4.1 logs through SLF4J 1.7 to Log4j 2: the Log4j that Kafka's own
# poms name, and its SLF4J 1.x binding (log4j-slf4j-impl, as Kafka's
# distribution ships; the slf4j2 binding finds no SLF4J 2 API to bind to).
LOG4J_VERSION=2.25.3

die() { echo "kafka.sh: $*" >&2; exit 1; }

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
}

cmd=${1:-}
case "$cmd" in ""|-h|--help|help) usage ;; esac
shift
port="" dir="" mode=default heap=1G cport="" foreground=0 maven="" wait_s=120
host=127.0.0.1 node=1 voters="" cluster_id=""
while [ $# -gt 0 ]; do
  case "$1" in
    --port) port=$2; shift 2 ;;
    --controller-port) cport=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --mode) mode=$2; shift 2 ;;
    --heap) heap=$2; shift 2 ;;
    --maven) maven=$2; shift 2 ;;
    --wait) wait_s=$2; shift 2 ;;
    --foreground) foreground=1; shift ;;
    --host) host=$2; shift 2 ;;
    --node-id) node=$2; shift 2 ;;
    --voters) voters=$2; shift 2 ;;
    --cluster-id) cluster_id=$2; shift 2 ;;
    -h|--help) usage ;;
    *) die "unknown argument: $1 (see bench/kafka.sh --help)" ;;
  esac
done
[ -n "$dir" ] || die "--dir DIR is required"
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
# The Maven dir a data dir was last used with is kept in DIR/maven.path,
# so `classpath --dir DIR` finds a download made with --maven elsewhere.
if [ -n "$maven" ]; then
  mkdir -p "$maven"
  maven=$(cd "$maven" && pwd)
  echo "$maven" > "$dir/maven.path"
elif [ -s "$dir/maven.path" ]; then
  maven=$(cat "$dir/maven.path")
else
  maven=$dir/maven
fi
pidfile=$dir/kafka.pid

# Resolves Kafka and its runtime dependencies into $maven/repository (a
# Maven local repository of its own, so ~/.m2 is left alone) and writes the
# classpath to $maven/classpath.txt. Done once: later calls reuse the file.
resolve() {
  local cp=$maven/classpath.txt
  if [ -s "$cp" ] && [ "$(cat "$maven/version" 2>/dev/null)" = "$KAFKA_VERSION" ]; then
    return
  fi
  command -v mvn > /dev/null || die "mvn not found (apt-get install maven)"
  mkdir -p "$maven"
  # kafka_2.13 is the broker (kafka.Kafka, kafka.tools.StorageTool) and
  # brings kafka-server, -metadata, -raft, -storage, the coordinators and
  # kafka-clients; kafka-tools has ProducerPerformance and EndToEndLatency;
  # the Log4j 2 binding makes the broker log (without it SLF4J drops
  # everything). The others are named so the list says what a broker needs,
  # though kafka_2.13 brings them anyway.
  cat > "$maven/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>weir.bench</groupId>
  <artifactId>kafka-broker</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_${SCALA_VERSION}</artifactId><version>${KAFKA_VERSION}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-server</artifactId><version>${KAFKA_VERSION}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-metadata</artifactId><version>${KAFKA_VERSION}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-raft</artifactId><version>${KAFKA_VERSION}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-storage</artifactId><version>${KAFKA_VERSION}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>${KAFKA_VERSION}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>${LOG4J_VERSION}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>${LOG4J_VERSION}</version></dependency>
  </dependencies>
</project>
EOF
  echo "kafka.sh: resolving Kafka $KAFKA_VERSION from Maven Central into $maven (once)" >&2
  # runtime scope: what the broker needs to run, not test or provided jars.
  # Maven's output goes to mvn.log, shown only if it fails.
  if ! mvn -B -f "$maven/pom.xml" -Dmaven.repo.local="$maven/repository" \
      dependency:build-classpath -Dmdep.includeScope=runtime \
      -Dmdep.outputFile="$cp" > "$maven/mvn.log" 2>&1; then
    rm -f "$cp"
    grep -E 'ERROR' "$maven/mvn.log" | head -n 20 >&2
    die "Maven could not resolve Kafka $KAFKA_VERSION (is Maven Central reachable? see $maven/mvn.log)"
  fi
  [ -s "$cp" ] || die "Maven wrote no classpath to $cp"
  echo "$KAFKA_VERSION" > "$maven/version"
}

# Prints the PID in the pid file if that process is still our broker.
running_pid() {
  local pid
  pid=$(cat "$pidfile" 2>/dev/null) || return 1
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  # A pid can be reused after a crash: only a kafka.Kafka JVM started with
  # this dir's config counts.
  tr '\0' ' ' < "/proc/$pid/cmdline" | grep -q "kafka.Kafka $dir/server.properties" || return 1
  echo "$pid"
}

# Asks host:port for cluster metadata (Metadata v4, the oldest version Kafka
# 4 still answers) and succeeds if the answer lists at least one broker:
# what a client needs, where an open port only says something listens
# (Kafka 4.1 binds its client port once the broker has registered with its
# controller and been unfenced, so the two come close together). Plain
# sockets, so no client library is needed.
probe() {
  python3 - "$1" "$2" <<'EOF'
import socket, struct, sys
host, port = sys.argv[1], int(sys.argv[2])
client = b"kafka.sh"
# Request header v1: api_key 3 (Metadata), version 4, correlation id,
# client id; body: no topics (an empty array, not null = all topics), no
# auto creation.
body = struct.pack(">hhih", 3, 4, 1, len(client)) + client + struct.pack(">ib", 0, 0)
try:
    with socket.create_connection((host, port), timeout=2) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        def read(n):
            b = b""
            while len(b) < n:
                c = s.recv(n - len(b))
                if not c:
                    raise EOFError
                b += c
            return b
        (size,) = struct.unpack(">i", read(4))
        r = read(size)
except (OSError, EOFError):
    sys.exit(1)
# Response: correlation id, throttle ms, brokers array.
corr, _throttle, nbrokers = struct.unpack(">iii", r[:12])
sys.exit(0 if corr == 1 and nbrokers >= 1 else 1)
EOF
}

port_in_use() {
  python3 -c 'import socket, sys
s = socket.socket()
s.settimeout(1)
sys.exit(0 if s.connect_ex((sys.argv[1], int(sys.argv[2]))) == 0 else 1)' "$1" "$2"
}

write_config() {
  # KRaft combined mode: this process is a broker and a controller (alone,
  # a single static voter; else one of --voters).
  voters=${voters:-$node@$host:$cport}
  local n rf isr
  n=$(tr ',' '\n' <<< "$voters" | grep -c .)
  rf=1 isr=1
  [ "$n" -ge 3 ] && rf=3 isr=2
  cat > "$dir/server.properties" <<EOF
# Written by bench/kafka.sh (mode $mode); rewritten on every start.
process.roles=broker,controller
node.id=$node
controller.quorum.voters=$voters
listeners=PLAINTEXT://$host:$port,CONTROLLER://$host:$cport
advertised.listeners=PLAINTEXT://$host:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$dir/data

# The internal topics on every node of the quorum (one alone), as many
# in sync as a production cluster asks.
num.partitions=1
offsets.topic.replication.factor=$rf
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$isr
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$isr
min.insync.replicas=$isr
# A group's first member is not kept waiting 3 s for others to join.
group.initial.rebalance.delay.ms=0
EOF
  if [ "$mode" = durable ]; then
    cat >> "$dir/server.properties" <<EOF

# durable: fsync the log after every append, before the produce is
# acknowledged (Kafka's default leaves it to the OS).
log.flush.interval.messages=1
EOF
  fi
  # Log4j 2 in its properties format (the distribution's YAML file would
  # need jackson-dataformat-yaml), to stdout, which a background start
  # sends to DIR/kafka.log.
  cat > "$dir/log4j2.properties" <<'EOF'
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = out
# As Kafka's own log4j2.yaml: the request and state-change logs are quiet.
logger.request.name = kafka.request.logger
logger.request.level = warn
logger.state.name = state.change.logger
logger.state.level = warn
EOF
}

start() {
  [ -n "$port" ] || die "start needs --port PORT"
  case "$mode" in default|durable) ;; *) die "--mode is default or durable, not $mode" ;; esac
  cport=${cport:-$((port + 1))}
  local pid
  if pid=$(running_pid); then
    die "a broker from $dir is already running (PID $pid); bench/kafka.sh stop --dir $dir"
  fi
  # A broker already on the port would answer the readiness probe for us.
  port_in_use "$host" "$port" && die "port $port is already in use"
  port_in_use "$host" "$cport" && die "controller port $cport is already in use (--controller-port)"
  command -v java > /dev/null || die "java not found (Kafka 4 needs Java 17 or later)"
  local jv
  jv=$(java -XshowSettings:properties -version 2>&1 | awk -F' = ' '/java.specification.version/ {print $2}')
  [ "${jv%%.*}" -ge 17 ] 2>/dev/null || die "Kafka 4 needs Java 17 or later; java is $jv"

  resolve
  local cp
  cp=$(cat "$maven/classpath.txt")
  write_config

  # Format the log dir once (KRaft needs a cluster id and the bootstrap
  # metadata on disk before the first start); a later start with the same
  # dir keeps its topics.
  if [ ! -e "$dir/data/meta.properties" ]; then
    local id=$cluster_id
    [ -n "$id" ] || id=$(java -cp "$cp" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n 1)
    [ -n "$id" ] || die "kafka.tools.StorageTool random-uuid gave no cluster id"
    # Its output (the whole broker config) goes to format.log.
    if ! java -Dlog4j2.configurationFile="$dir/log4j2.properties" -cp "$cp" kafka.tools.StorageTool \
        format --cluster-id "$id" --config "$dir/server.properties" > "$dir/format.log" 2>&1; then
      tail -n 20 "$dir/format.log" >&2
      die "formatting $dir/data failed (see $dir/format.log)"
    fi
    echo "kafka.sh: formatted $dir/data (cluster id $id)" >&2
  fi

  # As Kafka's kafka-server-start.sh and kafka-run-class.sh: a fixed heap
  # (Xms = Xmx, so the heap is not grown during a run) and G1 with a 20 ms
  # pause goal.
  local jvm=(-Xmx"$heap" -Xms"$heap" -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20
    -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent
    -XX:MaxInlineLevel=15 -Djava.awt.headless=true
    -Dlog4j2.configurationFile="$dir/log4j2.properties")
  local log=$dir/kafka.log
  if [ "$foreground" = 1 ]; then
    java "${jvm[@]}" -cp "$cp" kafka.Kafka "$dir/server.properties" &
  else
    # setsid: the broker outlives this script and the terminal's Ctrl-C.
    setsid java "${jvm[@]}" -cp "$cp" kafka.Kafka "$dir/server.properties" \
      > "$log" 2>&1 < /dev/null &
  fi
  pid=$!
  echo "$pid" > "$pidfile"
  # In the foreground, Ctrl-C (or a TERM to this script) stops the broker,
  # during startup too: a background job of a script ignores SIGINT, so
  # the broker would not see the terminal's Ctrl-C itself.
  [ "$foreground" = 1 ] && trap 'kill "$pid" 2>/dev/null' INT TERM

  local deadline=$((SECONDS + wait_s))
  until probe "$host" "$port"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$pidfile"
      [ "$foreground" = 1 ] || tail -n 20 "$log" >&2
      die "Kafka exited before it answered on $host:$port (log: ${log})"
    fi
    if [ $SECONDS -ge $deadline ]; then
      # Don't leave a half-started broker behind.
      terminate "$pid" 10
      rm -f "$pidfile"
      die "Kafka did not answer a Metadata request on $host:$port within ${wait_s}s (log: $log)"
    fi
    sleep 0.5
  done
  echo "kafka.sh: Kafka $KAFKA_VERSION ($mode mode) answers on $host:$port, PID $pid, log dir $dir/data" >&2
  echo "$pid"
  if [ "$foreground" = 1 ]; then
    # The first wait returns early when a trapped signal arrives; the
    # second waits for the broker's own shutdown.
    wait "$pid" || true
    wait "$pid" 2>/dev/null || true
    rm -f "$pidfile"
  fi
}

# SIGTERM: Kafka's shutdown hook closes the logs cleanly (no log recovery
# at the next start). If it has not exited after the given seconds,
# SIGKILL.
terminate() { # pid seconds
  local i
  kill "$1" 2>/dev/null || return 0
  for ((i = 0; i < $2 * 2; i++)); do
    kill -0 "$1" 2>/dev/null || return 0
    sleep 0.5
  done
  echo "kafka.sh: PID $1 did not stop in $2 s; killing it" >&2
  kill -9 "$1" 2>/dev/null || true
}

stop() {
  local pid
  pid=$(running_pid) || { rm -f "$pidfile"; die "no broker from $dir is running"; }
  terminate "$pid" 60
  rm -f "$pidfile"
  echo "kafka.sh: stopped PID $pid" >&2
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  classpath) resolve; cat "$maven/classpath.txt"; echo ;;
  *) die "unknown command: $cmd (start, stop or classpath)" ;;
esac
