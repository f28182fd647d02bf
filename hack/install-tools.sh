#!/usr/bin/env bash
# Installs the external tools the tests need, idempotently:
#   promtool (Debian's `prometheus` package) for `promtool check rules` / `test rules`.
# Skips whatever is already on PATH. Needs root (or sudo) for apt-get.
set -euo pipefail

SUDO=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null; then SUDO="sudo"; else
    echo "install-tools: not root and no sudo; install 'prometheus' (promtool) yourself" >&2
    exit 1
  fi
fi

if command -v promtool >/dev/null 2>&1; then
  echo "install-tools: promtool present ($(promtool --version 2>&1 | head -n1))"
else
  echo "install-tools: installing promtool from Debian's prometheus package"
  export DEBIAN_FRONTEND=noninteractive
  # The package ships a service; keep apt from starting it (policy-rc.d 101 = deny).
  policy=/usr/sbin/policy-rc.d
  created_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
    $SUDO chmod +x "$policy"
    created_policy=1
  fi
  trap '[ "$created_policy" = 1 ] && $SUDO rm -f "$policy"' EXIT
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  command -v promtool >/dev/null || { echo "install-tools: promtool still missing" >&2; exit 1; }
  echo "install-tools: promtool installed ($(promtool --version 2>&1 | head -n1))"
fi
