#!/usr/bin/env bash
# Runs one Java contender class against kafka-clients ${KAFKA_VERSION:-4.2.2}, building it first if needed.
#   benches/java/run.sh ExplicitAckLoop --bootstrap-server 127.0.0.1:9092 --topic t --group g --records 1000
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
version=${KAFKA_VERSION:-4.2.2}
cp_file=$here/target/$version/run-classpath.txt
[[ -s $cp_file ]] || "$here/build.sh" >&2
class=$1
shift
exec java ${JAVA_OPTS:--Xms64m -Xmx512m} -cp "$(cat "$cp_file")" "dev.shareworker.bench.$class" "$@"
