#!/usr/bin/env bash
# A local single-node Kafka (combined broker + controller) from Maven Central jars. No Docker.
# Three client listeners on 127.0.0.1 (inter-broker and controller traffic stay plaintext):
#   KAFKA_PORT           PLAINTEXT
#   KAFKA_SASL_SSL_PORT  SASL_SSL: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (user worker, created at
#                        format time) and OAUTHBEARER (Kafka's unsecured JWTs: alg none, sub + exp);
#                        connections.max.reauth.ms=10000, so clients re-authenticate (KIP-368)
#   KAFKA_MTLS_PORT      SSL that requires a client certificate signed by the test CA
# A throw-away CA, the broker's certificate (SAN IP:127.0.0.1, DNS:localhost) and a client
# certificate (EC P-256, PEM, PKCS#8 keys) are made with openssl on the first start into
# <cache>/tls-<port>/, which `start` keeps, so clients' trust survives restarts.
#
#   scripts/kafka.sh start              resolve jars (cached), format a fresh data dir, start, wait
#   scripts/kafka.sh stop               stop the broker this script started and wait for it to exit
#   scripts/kafka.sh kill               SIGKILL it (fault tests); its data directory stays
#   scripts/kafka.sh resume             start it again on its existing data (after kill or stop)
#   scripts/kafka.sh status             say whether it runs and where
#   scripts/kafka.sh logs               print the broker log
#   scripts/kafka.sh tool CLASS ARGS... run a Kafka tool class on the broker's classpath
#   scripts/kafka.sh env                print `export` lines: eval "$(scripts/kafka.sh env)" sets
#       KAFKA_BOOTSTRAP, KAFKA_SASL_SSL_BOOTSTRAP, KAFKA_MTLS_BOOTSTRAP (host:port, every broker);
#       KAFKA_TLS_CA_FILE, KAFKA_TLS_CERT_FILE, KAFKA_TLS_KEY_FILE (PEM; the client's key PKCS#8);
#       KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD (PLAIN and SCRAM), KAFKA_SASL_MECHANISMS;
#       KAFKA_CLIENT_PROPERTIES (SASL_SSL + SCRAM-SHA-512) and KAFKA_MTLS_CLIENT_PROPERTIES
#       (SSL + the client certificate): properties files for Kafka's Java tools
#
# Environment: KAFKA_VERSION (default 4.2.2), KAFKA_PORT (default 9092), KAFKA_CONTROLLER_PORT
# (default KAFKA_PORT + 1), KAFKA_SASL_SSL_PORT (default KAFKA_PORT + 2), KAFKA_MTLS_PORT (default
# KAFKA_PORT + 3), KAFKA_CACHE (default <repo>/.cache/kafka), KAFKA_HEAP (default 1g; 512m per
# process in a cluster).
#
# A cluster: KAFKA_BROKERS=N (N > 1) runs one KRaft controller and N brokers, each its own process,
# from the same jars; internal topics (offsets, transactions, share-group state) get replication
# factor min(N, 3). KAFKA_PORT defaults to 9192 then; broker i (1..N) listens on KAFKA_PORT +
# 10 × (i − 1) (PLAINTEXT), + 2 (SASL_SSL), + 3 (mutual TLS); the controller on KAFKA_PORT + 1.
# Every command above works on the whole cluster (with KAFKA_BROKERS set the same way), plus:
#   scripts/kafka.sh kill-broker I      SIGKILL broker I; its data directory stays
#   scripts/kafka.sh resume-broker I    start broker I again on its data
#   scripts/kafka.sh logs [I]           broker I's log (0: the controller)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
version=${KAFKA_VERSION:-4.2.2}
brokers=${KAFKA_BROKERS:-1}
[[ $brokers =~ ^[1-9][0-9]?$ ]] || { echo "kafka.sh: KAFKA_BROKERS must be 1..99, not '$brokers'" >&2; exit 1; }
if ((brokers > 1)); then
  port=${KAFKA_PORT:-9192}
else
  port=${KAFKA_PORT:-9092}
fi
controller_port=${KAFKA_CONTROLLER_PORT:-$((port + 1))}
sasl_ssl_port=${KAFKA_SASL_SSL_PORT:-$((port + 2))}
mtls_port=${KAFKA_MTLS_PORT:-$((port + 3))}
cache=${KAFKA_CACHE:-$repo/.cache/kafka}
jars=$cache/jars/$version
if ((brokers > 1)); then
  top=$cache/cluster-$port
else
  top=$cache/run-$port
fi
tls=$cache/tls-$port
# A throw-away broker: a fixed user for PLAIN and SCRAM-SHA-256/512, printed by `env`.
sasl_user=worker
sasl_password=worker-secret
sasl_mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER
reauth_ms=10000

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
  java -Xshare:auto -cp "$jars/*" -Dlog4j2.configurationFile="$top/tools-log4j2.properties" "$@"
}

# The nodes: 1 alone (broker and controller in one process), or the controller (node 0 here,
# node.id 100) and brokers 1..N.
nodes() {
  if ((brokers == 1)); then echo 1; else seq 0 "$brokers"; fi
}

# Points run, pidfile, logfile, roles, node_id and the node's ports at node $1.
select_node() {
  node=$1
  if ((brokers == 1)); then
    ((node == 1)) || die "a single broker is node 1 (set KAFKA_BROKERS for a cluster)"
    run=$top roles=broker,controller node_id=1
    node_port=$port node_sasl=$sasl_ssl_port node_mtls=$mtls_port
  elif ((node == 0)); then
    run=$top/controller roles=controller node_id=100
  elif ((node >= 1 && node <= brokers)); then
    run=$top/broker-$node roles=broker node_id=$node
    node_port=$((port + 10 * (node - 1)))
    node_sasl=$((node_port + 2)) node_mtls=$((node_port + 3))
  else
    die "no broker $node: brokers are 1..$brokers"
  fi
  pidfile=$run/kafka.pid
  logfile=$run/kafka.log
}

# Every broker's address on one listener: 0 PLAINTEXT, 2 SASL_SSL, 3 mutual TLS.
addresses() {
  local offset=$1 i out=()
  if ((brokers == 1)); then
    case $offset in
      0) echo "127.0.0.1:$port" ;; 2) echo "127.0.0.1:$sasl_ssl_port" ;; 3) echo "127.0.0.1:$mtls_port" ;;
    esac
    return
  fi
  for ((i = 1; i <= brokers; i++)); do
    out+=("127.0.0.1:$((port + 10 * (i - 1) + offset))")
  done
  (IFS=,; echo "${out[*]}")
}

running_pid() {
  [[ -f $pidfile ]] || return 1
  local pid
  pid=$(cat "$pidfile")
  kill -0 "$pid" 2>/dev/null || return 1
  echo "$pid"
}

# Whether any node of this cluster (or the single broker) runs.
any_running() {
  local n
  for n in $(nodes); do
    select_node "$n"
    running_pid >/dev/null && return 0
  done
  return 1
}
port_open() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# The test CA, the broker's certificate and a client certificate, made once per port into $tls
# (kept by `start`, so clients' trust survives restarts); client properties files for Java tools
# are rewritten each time.
ensure_tls() {
  if [[ ! -f $tls/.complete ]]; then
    command -v openssl >/dev/null || die "openssl is required to make the test certificates"
    local tmp=$tls.tmp.$$
    rm -rf "$tmp"
    mkdir -p "$tmp"
    make_certificates "$tmp" >"$tmp/openssl.log" 2>&1 \
      || { cat "$tmp/openssl.log" >&2; rm -rf "$tmp"; die "making the test certificates failed"; }
    rm -rf "$tls"
    mv "$tmp" "$tls"
    touch "$tls/.complete"
    say "made a test CA, broker and client certificates in $tls"
  fi
  cat >"$tls/client-sasl-ssl.properties" <<PROPS
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="$sasl_user" password="$sasl_password";
ssl.truststore.type=PEM
ssl.truststore.location=$tls/ca.pem
PROPS
  cat >"$tls/client-mtls.properties" <<PROPS
security.protocol=SSL
ssl.truststore.type=PEM
ssl.truststore.location=$tls/ca.pem
ssl.keystore.type=PEM
ssl.keystore.location=$tls/client-keystore.pem
PROPS
}

# EC P-256 keys (PKCS#8 PEM), certificates valid for 10 years; works with OpenSSL 1.1.1 and 3.
make_certificates() {
  local dir=$1
  cat >"$dir/openssl.cnf" <<'CNF'
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[broker]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
CNF
  local name
  for name in ca broker client; do
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$dir/$name.key" || return
  done
  openssl req -x509 -new -config "$dir/openssl.cnf" -extensions ca -key "$dir/ca.key" \
    -subj "/CN=share-worker test CA" -days 3650 -sha256 -set_serial "0x$(openssl rand -hex 16)" \
    -out "$dir/ca.pem" || return
  local cn
  for name in broker client; do
    [[ $name == broker ]] && cn=localhost || cn=$sasl_user
    openssl req -new -config "$dir/openssl.cnf" -key "$dir/$name.key" -subj "/CN=$cn" \
      -out "$dir/$name.csr" || return
    openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
      -set_serial "0x$(openssl rand -hex 16)" -days 3650 -sha256 \
      -extfile "$dir/openssl.cnf" -extensions "$name" -out "$dir/$name.pem" || return
    # Kafka's PEM key store: the PKCS#8 key, then the certificate chain.
    cat "$dir/$name.key" "$dir/$name.pem" "$dir/ca.pem" >"$dir/$name-keystore.pem"
    rm -f "$dir/$name.csr"
  done
  chmod 600 "$dir"/*.key "$dir"/*-keystore.pem
}


# server.properties for the selected node.
write_config() {
  mkdir -p "$run"
  local rf=$((brokers < 3 ? brokers : 3))
  local min_isr=$((rf > 1 ? 2 : 1))
  {
    echo "process.roles=$roles"
    echo "node.id=$node_id"
    echo "controller.listener.names=CONTROLLER"
    echo "controller.quorum.bootstrap.servers=127.0.0.1:$controller_port"
    echo "log.dirs=$run/data"
    # A killed broker is fenced (its partitions get new leaders) within 4 s, not 9.
    echo "broker.heartbeat.interval.ms=1000"
    echo "broker.session.timeout.ms=4000"
    if [[ $roles == controller ]]; then
      echo "listeners=CONTROLLER://127.0.0.1:$controller_port"
      echo "listener.security.protocol.map=CONTROLLER:PLAINTEXT"
    else
      local listeners="PLAINTEXT://127.0.0.1:$node_port,SASL_SSL://127.0.0.1:$node_sasl,MTLS://127.0.0.1:$node_mtls"
      if [[ $roles == broker,controller ]]; then
        echo "listeners=$listeners,CONTROLLER://127.0.0.1:$controller_port"
      else
        echo "listeners=$listeners"
      fi
      cat <<PROPS
advertised.listeners=$listeners
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL,MTLS:SSL
# TLS for the SASL_SSL and MTLS listeners: PEM files made by ensure_tls.
ssl.keystore.type=PEM
ssl.keystore.location=$tls/broker-keystore.pem
ssl.truststore.type=PEM
ssl.truststore.location=$tls/ca.pem
listener.name.mtls.ssl.client.auth=required
# SASL_SSL: PLAIN and SCRAM for $sasl_user (SCRAM credentials added at format time), OAUTHBEARER
# with Kafka's default unsecured-token validator; short sessions so clients re-authenticate.
listener.name.sasl_ssl.sasl.enabled.mechanisms=$sasl_mechanisms
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$sasl_user="$sasl_password";
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="broker";
listener.name.sasl_ssl.connections.max.reauth.ms=$reauth_ms
PROPS
    fi
    # Every node, the controller too: it creates topics with these defaults and checks group
    # configs against the group.share.min.* limits.
    cat <<PROPS
num.partitions=1
default.replication.factor=$rf
auto.create.topics.enable=false
group.initial.rebalance.delay.ms=0
offsets.topic.replication.factor=$rf
offsets.topic.num.partitions=3
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$min_isr
transaction.state.log.num.partitions=3
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$min_isr
share.coordinator.state.topic.num.partitions=3
# Tests use short locks and fast membership.
group.share.min.record.lock.duration.ms=1000
group.share.min.heartbeat.interval.ms=500
group.share.heartbeat.interval.ms=1000
group.share.min.session.timeout.ms=6000
group.share.session.timeout.ms=10000
PROPS
  } >"$run/server.properties"
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

write_tools_log_config() {
  mkdir -p "$top"
  [[ -f $top/tools-log4j2.properties ]] || cat >"$top/tools-log4j2.properties" <<PROPS
status = error
appender.console.type = Console
appender.console.name = stderr
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.stderr.ref = stderr
PROPS
}

start() {
  local n
  if any_running; then
    say "already running at $(addresses 0)"
    addresses 0
    return
  fi
  resolve_jars
  rm -rf "$top"
  ensure_tls
  write_tools_log_config
  local cluster_id
  cluster_id=$(java_cmd kafka.tools.StorageTool random-uuid)
  for n in $(nodes); do
    select_node "$n"
    write_config
    # The controller (alone, or in the single broker) starts the quorum by itself; SCRAM users
    # go into the bootstrap metadata it writes.
    local quorum=(--no-initial-controllers)
    [[ $roles == *controller* ]] && quorum=(--standalone)
    java_cmd kafka.tools.StorageTool format -t "$cluster_id" -c "$run/server.properties" "${quorum[@]}" \
      --add-scram "SCRAM-SHA-256=[name=$sasl_user,password=$sasl_password]" \
      --add-scram "SCRAM-SHA-512=[name=$sasl_user,password=$sasl_password]" \
      >"$run/format.log" 2>&1 || { cat "$run/format.log" >&2; die "formatting $run failed"; }
  done
  say "formatted cluster $cluster_id"
  for n in $(nodes); do
    launch "$n"
  done
  say "Kafka $version is up at $(addresses 0)"
  addresses 0
}

# Starts node $1 on its formatted data directory and waits until it answers.
launch() {
  select_node "$1"
  local p ports=("$controller_port")
  [[ $roles == controller ]] || ports=("$node_port" "$node_sasl" "$node_mtls")
  [[ $roles == broker,controller ]] && ports+=("$controller_port")
  for p in "${ports[@]}"; do
    if port_open "$p"; then
      die "something else already listens on 127.0.0.1:$p" \
        "(set KAFKA_PORT, KAFKA_SASL_SSL_PORT or KAFKA_MTLS_PORT to use other ports)"
    fi
  done
  local heap=${KAFKA_HEAP:-1g}
  ((brokers > 1)) && heap=${KAFKA_HEAP:-512m}
  say "starting Kafka $version node $node_id ($roles) on 127.0.0.1:${ports[0]}, log in $logfile"
  [[ -f $logfile ]] && mv "$logfile" "$logfile.previous"
  nohup java -Xms256m -Xmx"$heap" -XX:+UseG1GC -Djava.awt.headless=true \
    -cp "$jars/*" -Dlog4j2.configurationFile="$run/log4j2.properties" \
    kafka.Kafka "$run/server.properties" >"$run/stdout.log" 2>&1 &
  echo $! >"$pidfile"
  local deadline=$((SECONDS + 90))
  until port_open "${ports[0]}" && grep -q "Kafka Server started" "$logfile" 2>/dev/null; do
    if ! running_pid >/dev/null; then
      tail -n 40 "$run/stdout.log" "$logfile" >&2 2>/dev/null || true
      die "Kafka node $node_id exited during startup"
    fi
    if ((SECONDS > deadline)); then
      tail -n 40 "$logfile" >&2 2>/dev/null || true
      die "Kafka node $node_id did not answer on 127.0.0.1:${ports[0]} within 90 s"
    fi
    sleep 0.5
  done
}

# Starts every node that is not running on its existing data (after kill or stop).
resume() {
  local n
  [[ -d $top ]] || die "nothing to resume in $top: use start"
  ensure_tls
  for n in $(nodes); do
    select_node "$n"
    [[ -f $run/server.properties && -d $run/data ]] || die "nothing to resume in $run: use start"
    running_pid >/dev/null || launch "$n"
  done
  say "Kafka $version is up at $(addresses 0)"
  addresses 0
}

# SIGKILLs node $1 and waits for it to be gone.
kill_node() {
  select_node "$1"
  local pid
  pid=$(running_pid) || die "node $node_id is not running"
  say "killing Kafka node $node_id (pid $pid) with SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null; do
    sleep 0.1
  done
  rm -f "$pidfile"
}

kill_all() {
  local n killed=0
  for n in $(nodes); do
    select_node "$n"
    if running_pid >/dev/null; then
      kill_node "$n"
      killed=1
    fi
  done
  ((killed)) || die "not running"
}

# Stops the brokers (together), then the controller, waiting for each to exit.
stop() {
  local n pid pids=() controller=
  for n in $(nodes); do
    select_node "$n"
    if pid=$(running_pid); then
      if [[ $roles == controller ]]; then controller=$pid; else pids+=("$pid"); fi
    fi
    rm -f "$pidfile"
  done
  if ((${#pids[@]} == 0)) && [[ -z $controller ]]; then
    say "not running"
    return
  fi
  say "stopping Kafka (pid ${pids[*]} ${controller})"
  stop_pids "${pids[@]}"
  [[ -n $controller ]] && stop_pids "$controller"
  say "stopped"
}

stop_pids() {
  (($# > 0)) || return 0
  kill -TERM "$@" 2>/dev/null || true
  local pid deadline=$((SECONDS + 60))
  for pid in "$@"; do
    while kill -0 "$pid" 2>/dev/null; do
      if ((SECONDS > deadline)); then
        say "pid $pid still running after 60 s: killing it"
        kill -KILL "$pid" 2>/dev/null || true
      fi
      sleep 0.2
    done
  done
}

status() {
  local n pid up=0
  for n in $(nodes); do
    select_node "$n"
    if pid=$(running_pid); then
      up=$((up + 1))
      if [[ $roles == controller ]]; then
        echo "controller running (pid $pid) at 127.0.0.1:$controller_port"
      else
        echo "node $node_id running (pid $pid, Kafka $version) at 127.0.0.1:$node_port;" \
          "SASL_SSL at 127.0.0.1:$node_sasl, mutual TLS at 127.0.0.1:$node_mtls (kafka.sh env)"
      fi
    elif ((brokers > 1)); then
      echo "node $node_id ($roles) not running"
    fi
  done
  if ((up == 0)); then
    echo "not running"
    return 1
  fi
}

logs() {
  select_node "${1:-1}"
  [[ -f $logfile ]] || die "no log at $logfile"
  cat "$logfile"
}

tool() {
  [[ $# -ge 1 ]] || die "usage: kafka.sh tool CLASS [ARGS...]"
  resolve_jars
  write_tools_log_config
  java_cmd "$@"
}

# A single-quoted shell word (POSIX sh, bash, zsh).
quote() {
  local q="'\\''"
  printf "'%s'" "${1//\'/$q}"
}

# `export` lines for clients of this broker; the files exist after the first start on this port.
print_env() {
  [[ -f $tls/.complete ]] || say "no certificates in $tls yet: run scripts/kafka.sh start first"
  local name value
  while read -r name value; do
    printf 'export %s=%s\n' "$name" "$(quote "$value")"
  done <<VARS
KAFKA_BOOTSTRAP $(addresses 0)
KAFKA_SASL_SSL_BOOTSTRAP $(addresses 2)
KAFKA_MTLS_BOOTSTRAP $(addresses 3)
KAFKA_TLS_CA_FILE $tls/ca.pem
KAFKA_TLS_CERT_FILE $tls/client.pem
KAFKA_TLS_KEY_FILE $tls/client.key
KAFKA_SASL_USERNAME $sasl_user
KAFKA_SASL_PASSWORD $sasl_password
KAFKA_SASL_MECHANISMS $sasl_mechanisms
KAFKA_CLIENT_PROPERTIES $tls/client-sasl-ssl.properties
KAFKA_MTLS_CLIENT_PROPERTIES $tls/client-mtls.properties
VARS
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  kill) kill_all ;;
  resume) resume ;;
  kill-broker) [[ $# -eq 2 ]] || die "usage: kafka.sh kill-broker I"; kill_node "$2" ;;
  resume-broker) [[ $# -eq 2 ]] || die "usage: kafka.sh resume-broker I"; launch "$2"; say "node $node_id is up" ;;
  status) status ;;
  logs) logs "${2:-1}" ;;
  tool) shift; tool "$@" ;;
  env) print_env ;;
  *) die "usage: kafka.sh start|stop|kill|resume|kill-broker I|resume-broker I|status|logs [I]|env|tool CLASS ARGS..." ;;
esac
