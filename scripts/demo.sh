#!/usr/bin/env bash
# Runs the demo. Without REDIS_URL it starts a throwaway redis-server on a free
# port (installing Debian's package if missing) and stops it afterwards. When a
# JDK and Maven are present, a JVM Redisson worker joins in.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if [ -z "${REDIS_URL:-}" ]; then
  if ! command -v redis-server >/dev/null; then
    echo "installing redis-server (Debian package)..." >&2
    as_root apt-get update -qq && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
  fi
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  log=$(mktemp)
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no >"$log" 2>&1 &
  server=$!
  trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -f "$log"' EXIT
  # Ready when the server says so.
  timeout 10 bash -c "until grep -q 'Ready to accept connections' '$log'; do sleep 0.05; done"
  export REDIS_URL="redis://127.0.0.1:$port"
  echo "started a throwaway redis-server on port $port" >&2
fi

jar=tests/interop/java/target/interop-peer-4.7.0.jar
if [ ! -f "$jar" ] && command -v java >/dev/null && command -v mvn >/dev/null; then
  echo "building the JVM Redisson peer (Maven)..." >&2
  mvn -q -B -Dstyle.color=never -f tests/interop/java/pom.xml -P redisson-4 package -DskipTests >&2 || true
fi
[ -f "$jar" ] && export DEMO_JAVA_JAR="$PWD/$jar"

cargo run --quiet --example demo
