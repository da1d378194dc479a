#!/usr/bin/env bash
# Makes sure the system programs Horizon needs are present: Java 17 (for Spark), redis-server, and
# Chromium with its ChromeDriver (the console's real-browser tests and the demo's screenshot run
# Debian's headless Chromium). Installs Debian's packages when missing and running as root;
# otherwise says exactly what to install.
set -euo pipefail

missing=()
java_ok() {
  command -v java >/dev/null 2>&1 || return 1
  local major
  major=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1)
  [[ -n "$major" && "$major" -ge 17 ]]
}
java_ok || missing+=("openjdk-17-jre-headless")
command -v redis-server >/dev/null 2>&1 || missing+=("redis-server")
command -v chromium >/dev/null 2>&1 || missing+=("chromium")
command -v chromedriver >/dev/null 2>&1 || missing+=("chromium-driver")
# Text in the console's screenshots needs at least one font.
[[ -n "$(fc-list 2>/dev/null | head -n 1)" ]] || missing+=("fonts-dejavu-core")

if ((${#missing[@]} == 0)); then
  exit 0
fi
if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
  echo "installing ${missing[*]} with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # Debian starts the packaged service; Horizon starts its own servers on free ports.
  (systemctl stop redis-server || service redis-server stop) >/dev/null 2>&1 || true
else
  echo "Horizon needs: ${missing[*]}" >&2
  echo "Install them, for example: sudo apt-get install ${missing[*]}" >&2
  exit 1
fi
