#!/usr/bin/env bash
# Installs, on Debian, whatever fpmd's demo, tests and benchmark need and is
# missing. No-op when everything is there. Usage: scripts/deps.sh [extra packages]
# (DEPS_ONLY=1: only the extra packages, not the demo's and tests' set.)
set -euo pipefail
need=()
have() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
base=(php-cgi php-fpm nginx apache2 dokuwiki logrotate prometheus)
[ "${DEPS_ONLY:-}" != 1 ] || base=()
for pkg in "${base[@]}" "$@"; do
    have "$pkg" || need+=("$pkg")
done
if ((${#need[@]})); then
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    echo "installing: ${need[*]}"
    $SUDO apt-get update -qq
    # The web servers' packages would start their services on port 80 (one
    # of them then fails to install when another holds it); the tests start
    # their own. policy-rc.d exit 101 ("action forbidden") stops
    # invoke-rc.d and deb-systemd-invoke from starting any, for this
    # install only, and only when no policy is in place already.
    policy=/usr/sbin/policy-rc.d
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
        $SUDO chmod 755 "$policy"
        trap '$SUDO rm -f "$policy"' EXIT
    fi
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
command -v cargo >/dev/null || { echo "cargo not found: install Rust from https://rustup.rs" >&2; exit 1; }
# make test runs rustfmt and clippy: rustup's components, added when missing.
for c in rustfmt clippy; do
    case $c in rustfmt) probe="cargo fmt --version" ;; clippy) probe="cargo clippy --version" ;; esac
    if ! $probe >/dev/null 2>&1; then
        command -v rustup >/dev/null || { echo "cargo $c missing and no rustup to add it: install it with your Rust toolchain" >&2; exit 1; }
        echo "installing the $c component"
        rustup component add "$c"
    fi
done
