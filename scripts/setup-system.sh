#!/usr/bin/env bash
# Installs the Debian packages the project's tests, demo and benchmarks run against (real servers,
# not fakes): the bubblewrap sandbox, a PostgreSQL server, Chromium with its driver for browser tests,
# and the wrk / hyperfine load tools.
#
# Idempotent and fast when everything is present: it asks dpkg first and only runs `apt-get update`
# (once) and `apt-get install` when a package is missing. Safe in CI: no prompts, no stdin.
#
# Usage: scripts/setup-system.sh [EXTRA_PACKAGE ...]
#   Extra packages can also be listed in VF_EXTRA_APT_PACKAGES (space separated).
set -euo pipefail

PACKAGES=(
  bubblewrap      # sandbox for untrusted environment code
  python3         # Debian's interpreter: what sandboxed Python code runs on (read-only /usr)
  postgresql      # the hub's production database, started on loopback by the test set-up
  chromium        # real headless browser for the hub's web-page tests
  chromium-driver # WebDriver for the same browser
  wrk             # HTTP load generator (benchmarks)
  hyperfine       # command timing (benchmarks)
  fonts-liberation # real fonts so pages render in headless Chromium as users see them
)
# shellcheck disable=SC2206
PACKAGES+=(${VF_EXTRA_APT_PACKAGES:-} "$@")

is_installed() {
  [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" = "install ok installed" ]
}

missing=()
for pkg in "${PACKAGES[@]}"; do
  [ -n "$pkg" ] || continue
  is_installed "$pkg" || missing+=("$pkg")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "==> system packages present"
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "error: missing system packages (${missing[*]}) and no apt-get on this machine;" \
       "install them with your system's package manager" >&2
  exit 1
fi

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo -n)
  else
    echo "error: missing system packages (${missing[*]}); run this script as root" >&2
    exit 1
  fi
fi

export DEBIAN_FRONTEND=noninteractive
echo "==> installing system packages: ${missing[*]}"
"${SUDO[@]}" apt-get update -q </dev/null
"${SUDO[@]}" apt-get install -y -q \
  -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
  "${missing[@]}" </dev/null

still=()
for pkg in "${missing[@]}"; do
  is_installed "$pkg" || still+=("$pkg")
done
if [ ${#still[@]} -ne 0 ]; then
  echo "error: apt-get did not install: ${still[*]}" >&2
  exit 1
fi
echo "==> system packages installed"
