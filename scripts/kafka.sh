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
#       KAFKA_BOOTSTRAP, KAFKA_SASL_SSL_BOOTSTRAP, KAFKA_MTLS_BOOTSTRAP (host:port);
#       KAFKA_TLS_CA_FILE, KAFKA_TLS_CERT_FILE, KAFKA_TLS_KEY_FILE (PEM; the client's key PKCS#8);
#       KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD (PLAIN and SCRAM), KAFKA_SASL_MECHANISMS;
#       KAFKA_CLIENT_PROPERTIES (SASL_SSL + SCRAM-SHA-512) and KAFKA_MTLS_CLIENT_PROPERTIES
#       (SSL + the client certificate): properties files for Kafka's Java tools
#
# Environment: KAFKA_VERSION (default 4.2.2), KAFKA_PORT (default 9092), KAFKA_CONTROLLER_PORT
# (default KAFKA_PORT + 1), KAFKA_SASL_SSL_PORT (default KAFKA_PORT + 2), KAFKA_MTLS_PORT (default
# KAFKA_PORT + 3), KAFKA_CACHE (default <repo>/.cache/kafka), KAFKA_HEAP (default 1g).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
version=${KAFKA_VERSION:-4.2.2}
port=${KAFKA_PORT:-9092}
controller_port=${KAFKA_CONTROLLER_PORT:-$((port + 1))}
sasl_ssl_port=${KAFKA_SASL_SSL_PORT:-$((port + 2))}
mtls_port=${KAFKA_MTLS_PORT:-$((port + 3))}
cache=${KAFKA_CACHE:-$repo/.cache/kafka}
jars=$cache/jars/$version
run=$cache/run-$port
tls=$cache/tls-$port
pidfile=$run/kafka.pid
logfile=$run/kafka.log
bootstrap=127.0.0.1:$port
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

write_config() {
  mkdir -p "$run"
  cat >"$run/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller_port,SASL_SSL://127.0.0.1:$sasl_ssl_port,MTLS://127.0.0.1:$mtls_port
advertised.listeners=PLAINTEXT://127.0.0.1:$port,SASL_SSL://127.0.0.1:$sasl_ssl_port,MTLS://127.0.0.1:$mtls_port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL,MTLS:SSL
controller.quorum.bootstrap.servers=127.0.0.1:$controller_port
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
  ensure_tls
  write_config
  local cluster_id
  cluster_id=$(java_cmd kafka.tools.StorageTool random-uuid)
  java_cmd kafka.tools.StorageTool format -t "$cluster_id" -c "$run/server.properties" --standalone \
    --add-scram "SCRAM-SHA-256=[name=$sasl_user,password=$sasl_password]" \
    --add-scram "SCRAM-SHA-512=[name=$sasl_user,password=$sasl_password]" \
    >"$run/format.log" 2>&1 || { cat "$run/format.log" >&2; die "formatting the data directory failed"; }
  say "formatted cluster $cluster_id"
  launch
}

# Starts the broker on the formatted data directory in $run and waits until it answers.
launch() {
  local p
  for p in "$port" "$controller_port" "$sasl_ssl_port" "$mtls_port"; do
    if port_open "$p"; then
      die "something else already listens on 127.0.0.1:$p" \
        "(set KAFKA_PORT, KAFKA_SASL_SSL_PORT or KAFKA_MTLS_PORT to use other ports)"
    fi
  done
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
  ensure_tls
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
    echo "SASL_SSL at 127.0.0.1:$sasl_ssl_port, mutual TLS at 127.0.0.1:$mtls_port (kafka.sh env)"
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
KAFKA_BOOTSTRAP 127.0.0.1:$port
KAFKA_SASL_SSL_BOOTSTRAP 127.0.0.1:$sasl_ssl_port
KAFKA_MTLS_BOOTSTRAP 127.0.0.1:$mtls_port
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
  kill) kill_now ;;
  resume) resume ;;
  status) status ;;
  logs) logs ;;
  tool) shift; tool "$@" ;;
  env) print_env ;;
  *) die "usage: kafka.sh start|stop|kill|resume|status|logs|env|tool CLASS ARGS..." ;;
esac
