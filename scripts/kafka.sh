#!/usr/bin/env bash
# A local single-node Kafka (combined broker + controller) from Maven Central jars. No Docker.
#
#   scripts/kafka.sh start              resolve jars (cached), format a fresh data dir, start, wait
#   scripts/kafka.sh stop               stop the broker this script started and wait for it to exit
#   scripts/kafka.sh kill               SIGKILL it (fault tests); its data directory stays
#   scripts/kafka.sh resume             start it again on its existing data (after kill or stop)
#   scripts/kafka.sh status             say whether it runs and where
#   scripts/kafka.sh logs               print the broker log
#   scripts/kafka.sh tool CLASS ARGS... run a Kafka tool class on the broker's classpath
#
# Environment: KAFKA_VERSION (default 4.2.2), KAFKA_PORT (default 9092), KAFKA_CONTROLLER_PORT
# (default KAFKA_PORT + 1), KAFKA_CACHE (default <repo>/.cache/kafka), KAFKA_HEAP (default 1g).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
version=${KAFKA_VERSION:-4.2.2}
port=${KAFKA_PORT:-9092}
controller_port=${KAFKA_CONTROLLER_PORT:-$((port + 1))}
cache=${KAFKA_CACHE:-$repo/.cache/kafka}
jars=$cache/jars/$version
run=$cache/run-$port
pidfile=$run/kafka.pid
logfile=$run/kafka.log
bootstrap=127.0.0.1:$port

say() { echo "kafka.sh: $*" >&2; }
die() { say "$*"; exit 1; }

resolve_jars() {
  if [[ -f $jars/.complete ]]; then
    return
  fi
  command -v mvn >/dev/null || die "Maven (mvn) is required to fetch Kafka $version from Maven Central"
  command -v java >/dev/null || die "Java 17+ is required to run Kafka"
  say "resolving Kafka $version and its tools from Maven Central into $jars"
  rm -rf "$jars"
  mkdir -p "$jars"
  (cd "$repo/scripts/kafka" && mvn -B -q dependency:copy-dependencies \
      -Dkafka.version="$version" -DincludeScope=runtime -DoutputDirectory="$jars") \
    || die "could not resolve org.apache.kafka:kafka_2.13:$version from Maven Central"
  touch "$jars/.complete"
  say "$(find "$jars" -name '*.jar' | wc -l) jars cached"
}

java_cmd() {
  java -Xshare:auto -cp "$jars/*" -Dlog4j2.configurationFile="$run/log4j2.properties" "$@"
}

running_pid() {
  [[ -f $pidfile ]] || return 1
  local pid
  pid=$(cat "$pidfile")
  kill -0 "$pid" 2>/dev/null || return 1
  echo "$pid"
}

port_open() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

write_config() {
  mkdir -p "$run"
  cat >"$run/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller_port
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
controller.quorum.bootstrap.servers=127.0.0.1:$controller_port
log.dirs=$run/data
num.partitions=1
auto.create.topics.enable=false
group.initial.rebalance.delay.ms=0
offsets.topic.replication.factor=1
offsets.topic.num.partitions=3
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=3
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
share.coordinator.state.topic.num.partitions=3
# Tests use short locks and fast membership.
group.share.min.record.lock.duration.ms=1000
group.share.min.heartbeat.interval.ms=500
group.share.heartbeat.interval.ms=1000
group.share.min.session.timeout.ms=6000
group.share.session.timeout.ms=10000
PROPS
  cat >"$run/log4j2.properties" <<PROPS
status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = $logfile
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
PROPS
}

start() {
  local pid
  if pid=$(running_pid); then
    say "already running (pid $pid) at $bootstrap"
    echo "$bootstrap"
    return
  fi
  resolve_jars
  rm -rf "$run"
  write_config
  local cluster_id
  cluster_id=$(java_cmd kafka.tools.StorageTool random-uuid)
  java_cmd kafka.tools.StorageTool format -t "$cluster_id" -c "$run/server.properties" --standalone \
    >"$run/format.log" 2>&1 || { cat "$run/format.log" >&2; die "formatting the data directory failed"; }
  say "formatted cluster $cluster_id"
  launch
}

# Starts the broker on the formatted data directory in $run and waits until it answers.
launch() {
  if port_open "$port"; then
    die "something else already listens on 127.0.0.1:$port (set KAFKA_PORT to use another port)"
  fi
  say "starting Kafka $version on $bootstrap, log in $logfile"
  [[ -f $logfile ]] && mv "$logfile" "$logfile.previous"
  nohup java -Xms512m -Xmx"${KAFKA_HEAP:-1g}" -XX:+UseG1GC -Djava.awt.headless=true \
    -cp "$jars/*" -Dlog4j2.configurationFile="$run/log4j2.properties" \
    kafka.Kafka "$run/server.properties" >"$run/stdout.log" 2>&1 &
  echo $! >"$pidfile"
  local deadline=$((SECONDS + 90))
  until port_open "$port" && grep -q "Kafka Server started" "$logfile" 2>/dev/null; do
    if ! running_pid >/dev/null; then
      tail -n 40 "$run/stdout.log" "$logfile" >&2 2>/dev/null || true
      die "Kafka exited during startup"
    fi
    if ((SECONDS > deadline)); then
      tail -n 40 "$logfile" >&2 2>/dev/null || true
      die "Kafka did not answer on $bootstrap within 90 s"
    fi
    sleep 0.5
  done
  say "Kafka $version is up at $bootstrap"
  echo "$bootstrap"
}

resume() {
  local pid
  if pid=$(running_pid); then
    say "already running (pid $pid) at $bootstrap"
    echo "$bootstrap"
    return
  fi
  [[ -f $run/server.properties && -d $run/data ]] || die "nothing to resume in $run: use start"
  launch
}

kill_now() {
  local pid
  pid=$(running_pid) || die "not running"
  say "killing Kafka (pid $pid) with SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null; do
    sleep 0.1
  done
  rm -f "$pidfile"
}

stop() {
  local pid
  if ! pid=$(running_pid); then
    say "not running"
    rm -f "$pidfile"
    return
  fi
  say "stopping Kafka (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + 60))
  while kill -0 "$pid" 2>/dev/null; do
    if ((SECONDS > deadline)); then
      say "still running after 60 s: killing it"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    sleep 0.2
  done
  rm -f "$pidfile"
  say "stopped"
}

status() {
  local pid
  if pid=$(running_pid); then
    echo "running (pid $pid, Kafka $version) at $bootstrap"
  else
    echo "not running"
    return 1
  fi
}

logs() {
  [[ -f $logfile ]] || die "no log at $logfile"
  cat "$logfile"
}

tool() {
  [[ $# -ge 1 ]] || die "usage: kafka.sh tool CLASS [ARGS...]"
  resolve_jars
  mkdir -p "$run"
  [[ -f $run/tools-log4j2.properties ]] || cat >"$run/tools-log4j2.properties" <<PROPS
status = error
appender.console.type = Console
appender.console.name = stderr
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.stderr.ref = stderr
PROPS
  java -cp "$jars/*" -Dlog4j2.configurationFile="$run/tools-log4j2.properties" "$@"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  kill) kill_now ;;
  resume) resume ;;
  status) status ;;
  logs) logs ;;
  tool) shift; tool "$@" ;;
  *) die "usage: kafka.sh start|stop|kill|resume|status|logs|tool CLASS ARGS..." ;;
esac
