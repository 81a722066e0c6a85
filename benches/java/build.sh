#!/usr/bin/env bash
# Compiles the Java contenders against org.apache.kafka:kafka-clients:${KAFKA_VERSION:-4.2.2}.
#
#   benches/java/build.sh            -> target/<version>/classes and target/<version>/classpath.txt
#   benches/java/run.sh CLASS ARGS   runs a class with that classpath (builds first if needed)
#
# Uses only `mvn dependency:build-classpath` (the plugin scripts/kafka.sh already uses) and javac,
# so after the first download it runs offline from ~/.m2. Extra arguments go to mvn.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
version=${KAFKA_VERSION:-4.2.2}
for arg in "$@"; do
  case $arg in -Dkafka.version=*) version=${arg#-Dkafka.version=} ;; esac
done
out=$here/target/$version
command -v mvn >/dev/null || { echo "build.sh: Maven (mvn) is required" >&2; exit 1; }
command -v javac >/dev/null || { echo "build.sh: a JDK 17+ (javac) is required" >&2; exit 1; }
mkdir -p "$out"
if [[ ! -s $out/classpath.txt ]]; then
  (cd "$here" && mvn -B -q dependency:build-classpath -Dkafka.version="$version" \
      -DincludeScope=runtime -Dmdep.outputFile="$out/classpath.txt" "$@") \
    || { echo "build.sh: could not resolve kafka-clients $version from Maven Central" >&2; exit 1; }
fi
rm -rf "$out/classes"
mkdir -p "$out/classes"
javac --release 17 -Xlint:all -Werror -d "$out/classes" -cp "$(cat "$out/classpath.txt")" \
  $(find "$here/src/main/java" -name '*.java' | sort)
echo "$out/classes:$(cat "$out/classpath.txt")" >"$out/run-classpath.txt"
echo "build.sh: built the Java contenders against kafka-clients $version in $out" >&2
