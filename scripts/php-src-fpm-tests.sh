#!/usr/bin/env bash
# php-src's own FPM test suite (sapi/fpm/tests) with fpmd in php-fpm's place.
#
#   scripts/php-src-fpm-tests.sh [options] PHP_SRC_DIR [TEST...]
#
# PHP_SRC_DIR is a php-src tree (the PHP-8.2 branch or a php-8.2.x release:
# run-tests.php at its root, sapi/fpm/tests/ below it). Nothing of it is
# copied into this project: a scratch tree is made under a temporary
# directory, laid out as php-src's build tree is, where the tests look for
# their binaries:
#
#   SCRATCH/run-tests.php           php-src's
#   SCRATCH/sapi/fpm/tests/         php-src's tests (they write their
#                                   configs, logs, sockets and scripts here)
#   SCRATCH/sapi/cli/php            -> the PHP CLI that runs the tests
#   SCRATCH/sapi/fpm/php-fpm        a wrapper: exec THE-BINARY "$@"
#
# tester.inc finds the FPM binary from TEST_PHP_EXECUTABLE (two directories
# up, then fpm/php-fpm): SCRATCH/sapi/fpm/php-fpm. The wrapper hands every
# argument php-fpm's flags and all (-y FILE -O -F -R -tt ...) to the binary
# unchanged: the suite judges the binary as it would php-fpm.
#
# Options:
#   --fpm BINARY   what runs in php-fpm's place (default: $FPMD, else
#                  ${CARGO_TARGET_DIR:-target}/debug/fpmd)
#   --baseline     run Debian's php-fpm instead (/usr/sbin/php-fpm8.2, or
#                  --fpm): the reference counts on this machine
#   --php BINARY   the PHP CLI that runs run-tests.php and the tests
#                  (default: /usr/bin/php8.2)
#   --scratch DIR  make the scratch tree there (default: a new temp dir);
#                  kept afterwards, with every failed test's .diff/.out/.log
#   --php-ini FILE the php.ini for the run, handed over as PHPRC (php-fpm
#                  and php-cgi read it instead of their SAPI's php.ini; their
#                  conf.d, which loads Debian's shared extensions, stays).
#                  Default: an empty one, i.e. PHP's compiled-in defaults, as
#                  in php-src's CI, which installs no php.ini (Debian's
#                  production php.ini turns expose_php and display_errors
#                  off, which many tests read). "system": no PHPRC.
#   --as USER      run the suite as USER instead of root (the tests that
#                  skip as root run then, those that need root skip): the
#                  scratch tree is given to USER
#   --heavy        also the resource-heavy tests (RUN_RESOURCE_HEAVY_TESTS)
#   --netns        run in a network namespace of its own, with only
#                  loopback (unshare -n, as root), so that nothing else on
#                  the machine can hold the tests' fixed ports (not the
#                  default)
#   --timeout N    per-test timeout of run-tests.php (default 60 s; a test
#                  still running 30 s later is killed and reported KILLED)
#   TEST...        test file names (bug68420-ipv4-all-addresses.phpt) or
#                  globs (log-bwp-*) inside sapi/fpm/tests; default: all
#
# As root the suite runs with TEST_FPM_RUN_AS_ROOT=1 (the tests then pass
# -R / --allow-to-run-as-root). The tests use fixed TCP ports from 9008 up:
# a run beside another one (or a php-fpm on them) fails; see --netns.
#
# Each test runs in a run-tests.php of its own (see below). Prints one line
# per test as it ends: its result (PASSED, FAILED, SKIPPED, XFAILED, WARNED,
# BORKED, KILLED), its name and, for a skip, the reason; then the counts.
# The same lines are in SCRATCH/results.txt, run-tests.php's output in
# SCRATCH/run.log, and a failed test's .diff/.out/.log beside it in
# SCRATCH/sapi/fpm/tests. Exit status: 0 when no test failed, 1 otherwise,
# 2 on a usage or set-up error.
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }

fpm=""
baseline=0
php=/usr/bin/php8.2
scratch=""
netns=0
timeout=60
php_ini=""
as_user=""
heavy=0
while [ $# -gt 0 ]; do
    case "$1" in
        --fpm) fpm=$2; shift 2 ;;
        --baseline) baseline=1; shift ;;
        --php) php=$2; shift 2 ;;
        --scratch) scratch=$2; shift 2 ;;
        --netns) netns=1; shift ;;
        --timeout) timeout=$2; shift 2 ;;
        --php-ini) php_ini=$2; shift 2 ;;
        --as) as_user=$2; shift 2 ;;
        --heavy) heavy=1; shift ;;
        --in-netns) in_netns=1; shift ;;  # internal: already unshared
        -h|--help) usage ;;
        -*) echo "unknown option $1" >&2; usage ;;
        *) break ;;
    esac
done
[ $# -ge 1 ] || usage
src=$(cd "$1" && pwd); shift
tests=("$@")

if [ "${in_netns:-0}" != 1 ]; then
    [ -f "$src/run-tests.php" ] && [ -d "$src/sapi/fpm/tests" ] || {
        echo "$src is not a php-src tree (no run-tests.php or sapi/fpm/tests)" >&2; exit 2; }
    if [ -z "$fpm" ]; then
        if [ $baseline = 1 ]; then fpm=/usr/sbin/php-fpm8.2
        else fpm=${FPMD:-${CARGO_TARGET_DIR:-$(dirname "$0")/../target}/debug/fpmd}; fi
    fi
    fpm=$(readlink -f "$fpm") || true
    [ -x "$fpm" ] || { echo "no executable to run in php-fpm's place: $fpm (build fpmd, or give --fpm)" >&2; exit 2; }
    [ -x "$php" ] || { echo "no PHP CLI at $php (give --php)" >&2; exit 2; }

    if [ -z "$scratch" ]; then scratch=$(mktemp -d /tmp/php-src-fpm-tests.XXXXXX); fi
    mkdir -p "$scratch"
    scratch=$(cd "$scratch" && pwd)
    rm -rf "$scratch/sapi"
    mkdir -p "$scratch/sapi/fpm" "$scratch/sapi/cli"
    cp "$src/run-tests.php" "$scratch/"
    cp -r "$src/sapi/fpm/tests" "$scratch/sapi/fpm/tests"
    # The one fixture a test takes from elsewhere in php-src (gh12621).
    mkdir -p "$scratch/ext/standard/tests/misc"
    cp "$src/ext/standard/tests/misc/browscap.ini" "$scratch/ext/standard/tests/misc/" 2>/dev/null || true
    ln -s "$(readlink -f "$php")" "$scratch/sapi/cli/php"
    printf '#!/bin/sh\nexec %q "$@"\n' "$fpm" >"$scratch/sapi/fpm/php-fpm"
    chmod 755 "$scratch/sapi/fpm/php-fpm"
    mkdir -p "$scratch/ini"
    rm -f "$scratch/ini/php.ini"
    case "$php_ini" in
        "") : >"$scratch/ini/php.ini" ;;
        system) ;;
        *) cp "$php_ini" "$scratch/ini/php.ini" ;;
    esac
    # The pools of the tests run as the user who runs them; as root with
    # -R. The tree must be readable by php-cgi and its children.
    chmod -R a+rX "$scratch"
    if [ -n "$as_user" ]; then
        id "$as_user" >/dev/null || exit 2
        chown -R "$as_user:$(id -gn "$as_user")" "$scratch"
    fi
    echo "php-src FPM tests: $src" >&2
    echo "in php-fpm's place: $fpm" >&2
    echo "scratch tree: $scratch" >&2

    if [ $netns = 1 ] && [ "$(id -u)" = 0 ] && command -v unshare >/dev/null; then
        exec unshare --net -- "$0" --in-netns --fpm "$fpm" --php "$php" \
            --scratch "$scratch" --timeout "$timeout" --php-ini "${php_ini:-}" \
            ${as_user:+--as "$as_user"} $([ $heavy = 1 ] && echo --heavy) "$src" ${tests[@]+"${tests[@]}"}
    fi
fi

if [ "${in_netns:-0}" = 1 ]; then
    ip link set lo up
fi

cd "$scratch"
targets=()
if [ ${#tests[@]} -eq 0 ]; then
    tests=('*.phpt')
fi
for t in "${tests[@]}"; do
    t=${t##*/}
    found=0
    for f in sapi/fpm/tests/$t; do
        if [ -f "$f" ]; then targets+=("$f"); found=1; fi
    done
    [ $found = 1 ] || { echo "no test matches $t" >&2; exit 2; }
done

export NO_INTERACTION=1
unset TEST_FPM_DEBUG TRAVIS TEST_FPM_EXTENSION_DIR
if [ $heavy = 1 ]; then export RUN_RESOURCE_HEAVY_TESTS=1; fi
run_as=()
if [ -n "$as_user" ] && [ "$(id -u)" = 0 ]; then
    run_as=(setpriv --reuid "$as_user" --regid "$(id -g "$as_user")" --init-groups --)
    export HOME=$scratch USER=$as_user LOGNAME=$as_user
elif [ "$(id -u)" = 0 ]; then
    export TEST_FPM_RUN_AS_ROOT=1
fi
if [ -f "$scratch/ini/php.ini" ]; then export PHPRC=$scratch/ini; else unset PHPRC; fi

# One run-tests.php per test, each in a session of its own: a test whose
# FPM wrote no pid file signals pid 0 (tester.inc: `kill -USR2 0`), i.e.
# its whole process group, and would otherwise stop the run (and whatever
# started it). Such a test is reported KILLED; what its session left
# running is stopped before the next test.
: >"$scratch/run.log"
: >"$scratch/results.txt"
for f in "${targets[@]}"; do
    name=${f##*/}
    w=$scratch/one.result
    rm -f "$w" "$scratch/one.sid"
    : >"$w"
    chmod a+w "$w"
    # run-tests.php's own timeout does not end a test blocked in a read
    # of the FPM's log: a hard limit of its own.
    (timeout -s KILL $((timeout + 30)) setsid -w sh -c 'echo $$ >"$0"; exec "$@"' "$scratch/one.sid" \
        ${run_as[@]+"${run_as[@]}"} "$php" run-tests.php -q -p "$scratch/sapi/cli/php" \
        --set-timeout "$timeout" -W "$w" "$f" >"$scratch/one.log" 2>&1 || true; true) 2>/dev/null
    sid=$(cat "$scratch/one.sid" 2>/dev/null || true)
    if [ -n "$sid" ]; then
        for pid in $(ps -o pid= -s "$sid" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
    fi
    sed 's/\x1b\[[0-9;]*m//g' "$scratch/one.log" | sed -n '/^Running selected tests/,/^=====/p' | sed '1d;$d' >>"$scratch/run.log"
    result=$(awk 'NR==1 {print $1}' "$w")
    [ -n "$result" ] || { result=KILLED; echo "$f: run-tests.php was killed (a signal to its own process group, or the hard timeout)" >>"$scratch/run.log"; }
    reason=$(sed 's/\x1b\[[0-9;]*m//g' "$scratch/one.log" | sed -n 's/.* reason: \(.*\)$/\1/p; s/.*(warn: \(.*\))$/\1/p' | head -1)
    printf '%s\t%s%s\n' "$result" "$name" "${reason:+	($reason)}" | tee -a "$scratch/results.txt"
done
rm -f "$scratch/one.result" "$scratch/one.sid" "$scratch/one.log"

echo
total=$(wc -l <"$scratch/results.txt")
for r in PASSED FAILED SKIPPED XFAILED WARNED BORKED LEAKED KILLED; do
    n=$(grep -c "^$r	" "$scratch/results.txt" || true)
    [ "$n" = 0 ] || printf '%-8s %3d\n' "$r" "$n"
done
printf '%-8s %3d\n' total "$total"
echo "full output: $scratch/run.log; failed tests' .diff/.out/.log beside them in $scratch/sapi/fpm/tests" >&2
if grep -q '^FAILED\|^BORKED\|^LEAKED\|^KILLED' "$scratch/results.txt"; then exit 1; fi
exit 0
