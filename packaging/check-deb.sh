#!/bin/sh
# Checks the Debian package `make deb` built, without installing it on
# this machine:
#   packaging/check-deb.sh target/debian/fpmd_VERSION-1_ARCH.deb
# 1. its control fields, its contents (every path, its mode and owner:
#    exactly the expected list), its conffiles, its maintainer scripts (run
#    with stubs: what they enable, start, stop or upgrade, with and without
#    systemd), lintian (no error, no warning but the one a package outside Debian's
#    archive always draws), and a few checks of lintian's kind of our own
#    (stripped binary, gzipped man pages, the changelog's version);
# 2. unpacked into a throw-away root (dpkg -x: no maintainer script runs,
#    so nothing is enabled or started), that root's unit passes
#    `systemd-analyze verify` (its Documentation= man pages looked up among
#    the packaged ones), its tmpfiles.d entry makes /run/fpmd, its man pages
#    render without a warning, and its fpmd runs `fpmd -t` on its packaged
#    configuration (in a mount namespace where /run is the root's, made by
#    that tmpfiles.d entry, as at boot).
# Any failure is reported and makes the exit status 1.
set -eu
[ $# -eq 1 ] && [ -f "$1" ] || { echo "usage: $0 PACKAGE.deb (one file; make deb builds it)" >&2; exit 1; }
deb=$1
install_hint="scripts/deps-deb.sh --checks (make test-deps) installs it"
for tool in dpkg-deb systemd-analyze systemd-tmpfiles man groff readelf unshare gzip lintian; do
	command -v "$tool" >/dev/null || { echo "check-deb.sh: $tool not found: $install_hint" >&2; exit 1; }
done
work=$(mktemp -d /tmp/fpmd-check-deb.XXXXXX)
trap 'rm -rf "$work"' EXIT
root=$work/root
status=0
fail() { echo "FAILED: $*"; status=1; }
ok() { echo "ok: $*"; }

# --- 1. The package itself -------------------------------------------------
field() { dpkg-deb -f "$deb" "$1"; }
[ "$(field Package)" = fpmd ] || fail "Package is '$(field Package)', not fpmd"
case "$(field Depends)" in
*libc6*php-cgi* | *php-cgi*libc6*) ok "Depends: $(field Depends)" ;;
*) fail "Depends lacks libc6 or php-cgi: $(field Depends)" ;;
esac
synopsis=$(field Description | head -n 1)
[ ${#synopsis} -le 80 ] || fail "the Description's first line is longer than 80 characters: $synopsis"
field Maintainer | grep -q '<.*@.*>' || fail "Maintainer has no address: $(field Maintainer)"

# Every entry: mode, owner, path (directories and files; no size, no date).
dpkg-deb -c "$deb" | awk '{ print $1, $2, $6 }' | sort >"$work/contents"
sort >"$work/expected" <<'EOF'
drwxr-xr-x 0/0 ./
drwxr-xr-x 0/0 ./etc/
drwxr-xr-x 0/0 ./etc/fpmd/
-rw-r--r-- 0/0 ./etc/fpmd/fpmd.toml
drwxr-xr-x 0/0 ./etc/fpmd/pool.d/
-rw-r--r-- 0/0 ./etc/fpmd/pool.d/www.toml
drwxr-xr-x 0/0 ./etc/logrotate.d/
-rw-r--r-- 0/0 ./etc/logrotate.d/fpmd
drwxr-xr-x 0/0 ./lib/
drwxr-xr-x 0/0 ./lib/systemd/
drwxr-xr-x 0/0 ./lib/systemd/system/
-rw-r--r-- 0/0 ./lib/systemd/system/fpmd.socket
drwxr-xr-x 0/0 ./usr/
drwxr-xr-x 0/0 ./usr/lib/
drwxr-xr-x 0/0 ./usr/lib/systemd/
drwxr-xr-x 0/0 ./usr/lib/systemd/system/
-rw-r--r-- 0/0 ./usr/lib/systemd/system/fpmd.service
drwxr-xr-x 0/0 ./usr/lib/tmpfiles.d/
-rw-r--r-- 0/0 ./usr/lib/tmpfiles.d/fpmd.conf
drwxr-xr-x 0/0 ./usr/sbin/
-rwxr-xr-x 0/0 ./usr/sbin/fpmd
drwxr-xr-x 0/0 ./usr/share/
drwxr-xr-x 0/0 ./usr/share/doc/
drwxr-xr-x 0/0 ./usr/share/doc/fpmd/
-rw-r--r-- 0/0 ./usr/share/doc/fpmd/README.md
-rw-r--r-- 0/0 ./usr/share/doc/fpmd/README.packaging.md
-rw-r--r-- 0/0 ./usr/share/doc/fpmd/changelog.Debian.gz
-rw-r--r-- 0/0 ./usr/share/doc/fpmd/copyright
drwxr-xr-x 0/0 ./usr/share/man/
drwxr-xr-x 0/0 ./usr/share/man/man5/
-rw-r--r-- 0/0 ./usr/share/man/man5/fpmd.toml.5.gz
drwxr-xr-x 0/0 ./usr/share/man/man8/
-rw-r--r-- 0/0 ./usr/share/man/man8/fpmd.8.gz
EOF
# dpkg-deb lists "./" only for some builders: compare without it.
sed -i '\#^drwxr-xr-x 0/0 \./$#d' "$work/contents" "$work/expected"
if diff -u "$work/expected" "$work/contents" >"$work/contents.diff"; then
	ok "contents: $(wc -l <"$work/expected") entries, modes and owners as expected"
else
	fail "contents differ from the expected list (- expected, + in the package):"
	sed -n '3,$p' "$work/contents.diff"
fi

mkdir "$work/control"
dpkg-deb -e "$deb" "$work/control"
printf '%s\n' /etc/fpmd/fpmd.toml /etc/fpmd/pool.d/www.toml /etc/logrotate.d/fpmd >"$work/conffiles"
if diff -u "$work/conffiles" "$work/control/conffiles"; then ok "conffiles"; else fail "conffiles"; fi
for script in preinst postinst prerm postrm; do
	[ -f "$work/control/$script" ] || continue
	sh -n "$work/control/$script" || fail "$script is not valid sh"
done
# What the maintainer scripts do, run with stubs of the commands they call
# (deb-systemd-helper, deb-systemd-invoke, systemctl, systemd-tmpfiles,
# fpmd) that log their arguments, in a mount namespace whose /run is a
# tmpfs with or without /run/systemd/system (a machine run by systemd, or
# not). STUB_ACTIVE: whether `fpmd status` finds a running fpmd.
stubs=$work/stubs
mkdir "$stubs"
for cmd in systemctl deb-systemd-helper deb-systemd-invoke systemd-tmpfiles fpmd; do
	cat >"$stubs/$cmd" <<STUB
#!/bin/sh
echo "$cmd \$*" >>"\$STUB_LOG"
case "$cmd \$*" in
"fpmd -c /etc/fpmd/fpmd.toml status --json") exit \$STUB_ACTIVE ;;
"fpmd -c /etc/fpmd/fpmd.toml upgrade") [ "\$STUB_UPGRADE" = 0 ] || echo "fpmd: upgrade refused (stub)" >&2; exit \$STUB_UPGRADE ;;
esac
exit 0
STUB
	chmod 755 "$stubs/$cmd"
done
# run_script SYSTEMD(yes|no) ACTIVE(0|1) UPGRADE_STATUS SCRIPT ARGS...
run_script() {
	systemd=$1 active=$2 upgrade=$3 script=$4
	shift 4
	: >"$work/stub.log"
	STUB_LOG=$work/stub.log STUB_ACTIVE=$active STUB_UPGRADE=$upgrade PATH=$stubs:/usr/bin:/bin \
		unshare --mount --propagation private sh -c 'mount -t tmpfs none /run && { [ "$0" = no ] || mkdir -p /run/systemd/system; } && exec sh "$@"' \
		"$systemd" "$work/control/$script" "$@" >"$work/script.out" 2>&1
}
called() { grep -qxF "$1" "$work/stub.log"; }
# scenario DESCRIPTION CONDITION...: each condition is sh; the first false
# one fails the scenario, with what was called and said.
scenario() {
	what=$1
	shift
	for cond in "$@"; do
		if ! eval "$cond"; then
			fail "$what: $cond; called: $(tr '\n' ';' <"$work/stub.log") said: $(cat "$work/script.out")"
			return
		fi
	done
	ok "$what"
}
run_script yes 1 0 postinst configure && st=0 || st=$?
scenario "postinst, first install under systemd: enables and starts fpmd.service (not the opt-in fpmd.socket)" '[ $st = 0 ]' \
	'called "deb-systemd-helper enable fpmd.service"' 'called "deb-systemd-invoke start fpmd.service"' \
	'! grep -q "fpmd.socket" "$work/stub.log"' \
	'called "systemd-tmpfiles --create fpmd.conf"' '! called "fpmd -c /etc/fpmd/fpmd.toml upgrade"'
run_script yes 0 0 postinst configure 0.0.9-1 && st=0 || st=$?
scenario "postinst, upgrade of a running fpmd: fpmd upgrade, no restart" '[ $st = 0 ]' \
	'called "fpmd -c /etc/fpmd/fpmd.toml upgrade"' '! grep -q restart "$work/stub.log"'
run_script yes 0 78 postinst configure 0.0.9-1 && st=0 || st=$?
scenario "postinst, upgrade refused by the new binary: the old fpmd serves on, the package configures" '[ $st = 0 ]' \
	'called "fpmd -c /etc/fpmd/fpmd.toml upgrade"' '! grep -q restart "$work/stub.log"' \
	'grep -q "the old one serves on" "$work/script.out"'
run_script yes 1 0 postinst configure 0.0.9-1 && st=0 || st=$?
scenario "postinst, upgrade while fpmd is stopped: no fpmd upgrade, the unit is started" '[ $st = 0 ]' \
	'called "deb-systemd-invoke start fpmd.service"' '! called "fpmd -c /etc/fpmd/fpmd.toml upgrade"'
run_script no 0 0 postinst configure 0.0.9-1 && st=0 || st=$?
scenario "postinst without systemd (a chroot, a container): enables the unit, starts and upgrades nothing" '[ $st = 0 ]' \
	'called "deb-systemd-helper enable fpmd.service"' '! grep -q "^deb-systemd-invoke\|^fpmd \|^systemctl" "$work/stub.log"'
run_script yes 0 0 prerm upgrade 0.1.1-1 && st=0 || st=$?
scenario "prerm before an upgrade: fpmd is not stopped" '[ $st = 0 ]' '! grep -q stop "$work/stub.log"'
run_script yes 0 0 prerm remove && st=0 || st=$?
scenario "prerm on removal: stops fpmd" '[ $st = 0 ]' 'called "deb-systemd-invoke stop fpmd.service"'

mkdir "$root"
dpkg -x "$deb" "$root"
# (.debug_gdb_scripts is loaded with the program: not debug information.)
if readelf -S -W "$root/usr/sbin/fpmd" | grep -qE ' \.(symtab|debug_info|debug_line) '; then
	fail "/usr/sbin/fpmd is not stripped (its symbols belong in fpmd-dbgsym)"
else
	ok "/usr/sbin/fpmd is stripped"
fi
for page in usr/share/man/man8/fpmd.8.gz usr/share/man/man5/fpmd.toml.5.gz; do
	gzip -t "$root/$page" || fail "$page is not a valid gzip file"
done

top=$(zcat "$root/usr/share/doc/fpmd/changelog.Debian.gz" | head -n 1)
case "$top" in
"fpmd ($(field Version)) "*) ok "changelog.Debian.gz starts at $(field Version)" ;;
*) fail "changelog.Debian.gz does not start at the package's version $(field Version): $top (add an entry to packaging/debian/changelog)" ;;
esac

# initial-upload-closes-no-bugs: Debian's archive wants an ITP bug closed
# by a first upload; this package is not uploaded there. TMPDIR: lintian
# leaves its mldbm-elf-* caches in /tmp otherwise (they go with $work).
TMPDIR="$work" lintian --tag-display-limit 0 --suppress-tags initial-upload-closes-no-bugs "$deb" >"$work/lintian" 2>&1 || true
if grep -qE '^[EW]:' "$work/lintian"; then
	fail "lintian:"
	cat "$work/lintian"
else
	ok "lintian $(lintian --version | sed 's/^Lintian v//'): no error, no warning"
fi

# --- 2. Unpacked into a throw-away root ------------------------------------
for page in man8/fpmd.8.gz man5/fpmd.toml.5.gz; do
	out=$(zcat "$root/usr/share/man/$page" | groff -man -Tutf8 -ww -z 2>&1) || fail "groff cannot render $page"
	[ -z "$out" ] || fail "groff warns about $page: $out"
	MANPATH=$root/usr/share/man man -l "$root/usr/share/man/$page" >/dev/null 2>&1 || fail "man -l $page"
done
for page in fpmd.8 fpmd.toml.5; do
	MANPATH=$root/usr/share/man man -w "${page%.*}" >/dev/null 2>&1 || fail "man does not find ${page%.*} among the packaged pages"
done
ok "man pages render (groff -ww) and man finds them"

# systemd-analyze verify wants the unit's binaries and systemd's own units
# in the root; Documentation= is checked by running man, which looks in
# MANPATH: the packaged pages.
mkdir -p "$root/usr/lib/systemd"
cp -an /usr/lib/systemd/. "$root/usr/lib/systemd/"
for unit in fpmd.service fpmd.socket; do
	out=$(MANPATH=$root/usr/share/man systemd-analyze verify --root="$root" "$unit" 2>&1) && [ -z "$out" ] &&
		ok "systemd-analyze verify $unit ($(systemctl --version | head -n 1))" ||
		{
			fail "systemd-analyze verify $unit:"
			printf '%s\n' "$out"
		}
done
grep -qx 'ExecStart=/usr/sbin/fpmd -c /etc/fpmd/fpmd.toml' "$root/usr/lib/systemd/system/fpmd.service" || fail "ExecStart= is not the packaged binary and configuration"
grep -qx 'Type=notify' "$root/usr/lib/systemd/system/fpmd.service" || fail "the unit is not Type=notify"
grep -qx 'ExecReload=/usr/sbin/fpmd -c /etc/fpmd/fpmd.toml reload' "$root/usr/lib/systemd/system/fpmd.service" || fail "ExecReload= is not fpmd reload"

systemd-tmpfiles --root="$root" --create fpmd.conf || fail "systemd-tmpfiles --create fpmd.conf"
[ "$(stat -c '%F %a %U:%G' "$root/run/fpmd" 2>/dev/null)" = "directory 755 root:root" ] &&
	ok "tmpfiles.d makes /run/fpmd 0755 root:root" ||
	fail "tmpfiles.d did not make /run/fpmd as a 0755 directory of root: $(stat -c '%F %a %U:%G' "$root/run/fpmd" 2>&1)"

# fpmd -t on the packaged configuration, /run being the root's (with the
# runtime directory tmpfiles.d made), the rest this machine's (php-cgi,
# www-data).
if unshare --mount --propagation private sh -c 'mount --bind "$1/run" /run && exec "$1/usr/sbin/fpmd" -t -c "$1/etc/fpmd/fpmd.toml"' sh "$root" >"$work/t.out" 2>"$work/t.err"; then
	missing=""
	for line in 'pid = "/run/fpmd/fpmd.pid"' 'error_log = "/var/log/fpmd.log"' '[www]' 'user = "www-data"' 'group = "www-data"' 'listen.address = "/run/fpmd/www.sock"' 'control_socket = "/run/fpmd/fpmd.sock"'; do
		grep -qF "$line" "$work/t.out" || missing="$missing '$line'"
	done
	[ -z "$missing" ] && ok "fpmd -t accepts the packaged configuration" ||
		{
			fail "fpmd -t does not print:$missing"
			cat "$work/t.out"
		}
else
	fail "fpmd -t -c $root/etc/fpmd/fpmd.toml refused the packaged configuration:"
	cat "$work/t.err" "$work/t.out"
fi

[ $status = 0 ] && echo "check-deb.sh: $deb: all checks passed" || echo "check-deb.sh: $deb: FAILED"
exit $status
