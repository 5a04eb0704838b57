#!/bin/sh
# Checks the packaging files without installing anything:
#   packaging/check.sh [FPMD_BINARY]     (default: target/debug/fpmd)
# `systemd-analyze verify` wants ExecStart='s binary to exist, so the unit is
# verified inside a scratch root holding the binary as /usr/sbin/fpmd and a
# copy of this machine's systemd units; the unit's Documentation= pages are
# looked up (systemd-analyze runs man) among the repository's man/ pages.
# Any warning counts as a failure (systemd-analyze itself exits 0 on
# unknown keys or types).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-${CARGO_TARGET_DIR:-$here/../target}/debug/fpmd}
[ -x "$bin" ] || { echo "check.sh: no fpmd binary at $bin (cargo build first)" >&2; exit 1; }
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
status=0

if command -v systemd-analyze >/dev/null; then
	mkdir -p "$root/usr/sbin" "$root/bin" "$root/usr/lib" "$root/etc/systemd/system"
	cp "$bin" "$root/usr/sbin/fpmd"
	cp /bin/kill "$root/bin/kill"
	cp -a /usr/lib/systemd "$root/usr/lib/"
	cp "$here/systemd/fpmd.service" "$here/systemd/fpmd.socket" "$root/etc/systemd/system/"
	mkdir -p "$root/usr/share/man/man8" "$root/usr/share/man/man5"
	cp "$here/../man/fpmd.8" "$root/usr/share/man/man8/"
	cp "$here/../man/fpmd.toml.5" "$root/usr/share/man/man5/"
	for unit in fpmd.service fpmd.socket; do
		ok=ok
		out=$(MANPATH="$root/usr/share/man" systemd-analyze verify --root="$root" "$unit" 2>&1) || ok=FAILED
		[ -z "$out" ] || { printf '%s
' "$out"; ok=FAILED; }
		echo "systemd-analyze verify $unit ($(systemctl --version | head -n1)): $ok"
		[ $ok = ok ] || status=1
	done
else
	echo "FAILED: systemd-analyze not installed, unit not verified: apt-get install systemd (make test-deps does)"
	status=1
fi

if command -v logrotate >/dev/null; then
	ok=ok
	out=$(logrotate -d -s "$root/logrotate.state" "$here/logrotate/fpmd" 2>&1) || ok=FAILED
	if printf '%s\n' "$out" | grep -qi 'error'; then ok=FAILED; fi
	[ $ok = ok ] || printf '%s\n' "$out"
	echo "logrotate -d: $ok"
	[ $ok = ok ] || status=1
else
	echo "FAILED: logrotate not installed, rotation not checked: apt-get install logrotate (make test-deps does)"
	status=1
fi
exit $status
