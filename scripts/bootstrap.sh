#!/usr/bin/env bash
# Installs the system tools kafkalake needs when they are missing (Java 17, Maven, Python venv support),
# plus the Debian packages named as arguments (`make test` asks for chromium, for the inventory page test).
set -euo pipefail
missing=()
command -v java >/dev/null || missing+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null || missing+=(maven)
python3 -c "import ensurepip" 2>/dev/null || missing+=(python3-venv)
[ -x /usr/bin/python3.11 ] || missing+=(python3.11)  # stands in for EMR's Python 3.11 in the job archive test
for package in "$@"; do command -v "$package" >/dev/null || missing+=("$package"); done
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
echo "[bootstrap] installing ${missing[*]}"
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "[bootstrap] please install: ${missing[*]} (needs root and apt-get)" >&2
  exit 1
fi
apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
