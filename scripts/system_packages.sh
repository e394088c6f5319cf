#!/usr/bin/env bash
# Installs the Debian packages named as arguments that are missing, with apt-get (sudo -n when not
# root). Used by .ci/run (Chromium, PostgreSQL) and `make cluster-e2e` (PostgreSQL, Redis).
# Exit status 0 even when they cannot be installed: the tests that need them skip with a message,
# and scripts/cluster_e2e.py names what is missing.
set -uo pipefail
command -v apt-get >/dev/null 2>&1 || { echo "no apt-get: install $* yourself"; exit 0; }
installed() {
  case "$1" in
    chromium-driver) command -v chromedriver >/dev/null 2>&1 ;;
    postgresql) ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 ;;
    redis-server) command -v redis-server >/dev/null 2>&1 ;;
    *) dpkg -s "$1" >/dev/null 2>&1 ;;
  esac
}
missing=""
for package in "$@"; do installed "$package" || missing="$missing $package"; done
[ -z "$missing" ] && exit 0
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo -n"
{ $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
    $missing >/dev/null; } || echo "could not install$missing: what needs them will skip or say so"
exit 0
