#!/usr/bin/env bash
# Spark (pyspark 4) needs a Java 17+ runtime. Install Debian's headless JRE when none is present.
set -euo pipefail
version_of() { "$1" -version 2>&1 | awk -F'"' '/version/ {split($2, v, "."); print v[1]; exit}'; }
if command -v java >/dev/null 2>&1 && [ "$(version_of java)" -ge 17 ] 2>/dev/null; then
  exit 0
fi
echo "ensure-java: no Java 17+ found; installing Debian's default headless JRE" >&2
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq default-jre-headless >/dev/null
java -version 2>&1 | head -1
