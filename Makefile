# fpmd: the two commands of the README, and the rest.
#   make demo   install what is missing, build, run fpmd + nginx, print the URL
#   make test   install what is missing, run every test
.PHONY: all deps test-deps build demo test bench clean deb deb-deps php-src-fpm-tests

all: build

deps:
	scripts/deps.sh

build:
	cargo build --release

demo: deps build
	scripts/demo.sh

# deps, tmux (the terminal the tests run `fpmd status` in), and lighttpd,
# Caddy and h2o (with nginx and Apache, the web servers of
# tests/it/webservers.rs; lighttpd also of tests/it/script_checks.rs);
# wordpress, mariadb-server and php-symfony-http-foundation (the
# applications of tests/it/sapi_apps.rs; the test starts its own MariaDB);
# cargo-deb and the tools of the packaging checks (scripts/deps-deb.sh
# --checks).
test-deps:
	scripts/deps.sh tmux lighttpd caddy h2o wordpress mariadb-server php-symfony-http-foundation fail2ban zabbix-frontend-php
	scripts/deps-deb.sh --checks

# The Debian package, with cargo-deb ([package.metadata.deb] in Cargo.toml;
# what it installs: packaging/README.md): $(DEB_DIR)/fpmd_VERSION-1_ARCH.deb.
DEB_DIR ?= $(or $(CARGO_TARGET_DIR),target)/debian

deb-deps:
	scripts/deps-deb.sh

# (Older packages are removed first, so that $(DEB_DIR)/fpmd_*.deb is this one.)
deb: deb-deps
	rm -f $(DEB_DIR)/fpmd_*.deb $(DEB_DIR)/fpmd-dbgsym_*.ddeb
	cargo deb --output $(DEB_DIR)/

# rustfmt and clippy first (a warning fails), then every test: the unit
# tests, the layer check (tests/layers.rs), the integration tests once per
# spawn strategy (pm.spawn); then the
# packaging files are verified (packaging/check.sh, on the binary cargo test
# built), the Debian package is built and checked (contents, installed into
# a throw-away root: packaging/check-deb.sh), the Dockerfile and the
# Kubernetes manifests are linted, validated and cross-checked
# (packaging/check-manifests.sh, on the release binary make deb built); then
# a one-round smoke run of the benchmark and one of the scale bench, so
# that they cannot rot; then each
# cargo fuzz target for FUZZ_SECS.
test: test-deps
	cargo fmt --check
	cargo clippy --all-targets -- -D warnings
	cargo test
	FPMD_TEST_SPAWN=exec cargo test --test it
	packaging/check.sh
	$(MAKE) deb
	packaging/check-deb.sh $(DEB_DIR)/fpmd_*.deb
	packaging/check-manifests.sh
	$(MAKE) bench-smoke
	$(MAKE) bench-scale-smoke
	$(MAKE) fuzz-smoke

clean:
	cargo clean

# The comparison with php-fpm (bench/README.md); both need root (pools run as www-data).
#   make bench        full run: markdown table on stdout, bench/results/latest.json and .png
#                     (more options: make bench BENCH_ARGS="--fpmd-variants exec,prefork")
#   make bench-smoke  1 round of 1 s per workload and nginx mode into a temp dir, which is
#                     removed when it passes: proves the bench still works (the test suite
#                     runs it); ~1¼ min
.PHONY: bench-deps bench-smoke bench-pm bench-reload bench-scale bench-scale-large bench-scale-smoke bench-manager-mem
BENCH_ARGS ?=

# wrk and matplotlib for every bench; MariaDB, WordPress and its theme for
# make bench's WordPress workloads.
bench-deps:
	scripts/deps.sh wrk python3-matplotlib mariadb-server wordpress wordpress-theme-twentytwentyone

bench: bench-deps build
	/usr/bin/python3 bench/bench.py --chart bench/results/latest.png $(BENCH_ARGS)

bench-smoke: bench-deps build
	@d=$$(mktemp -d /tmp/fpmd-bench-smoke.XXXXXX); \
	if /usr/bin/python3 bench/bench.py --smoke --out $$d/smoke.json --chart $$d/smoke.png $(BENCH_ARGS); \
	then rm -rf $$d; else echo "bench-smoke FAILED (result and chart kept in $$d)" >&2; exit 1; fi

# The process-manager scenarios of issue 4 (dynamic scale-up, ondemand idle
# and cold start, backpressure) against php-fpm: one markdown table per
# scenario on stdout, bench/results/pm-scenarios.json; about 2 minutes.
BENCH_PM_ARGS ?=

bench-pm: bench-deps build
	/usr/bin/python3 bench/pm_scenarios.py $(BENCH_PM_ARGS)

# Reload under load against php-fpm (SIGUSR2, with its defaults and with
# process_control_timeout = 10s): wrk during 10 reloads, behind nginx with
# and without upstream keepalive, and one 10-second request across a
# reload; markdown tables on stdout, bench/results/reload.json; about 5 minutes.
BENCH_RELOAD_ARGS ?=

bench-reload: bench-deps build
	/usr/bin/python3 bench/reload.py $(BENCH_RELOAD_ARGS)

# Hundreds of pools against php-fpm: for N in 1, 50, 200, 500 pools, ondemand
# and dynamic, each backend started alone with the same N pools: start time,
# manager and total memory (PSS), php processes, one cold request per pool
# straight over FastCGI (p50/p99/max and where the slowest were), memory
# after idle, a second round, the reload of one pool among N (and whether
# the other pools' php processes were replaced), the graceful stop until the
# whole process tree is gone; then the graceful stop of 500 idle ondemand
# pools; one markdown table per (mode, N) on stdout, bench/results/scale.json
# and scale.png; about 11 minutes. Every step has a timeout; a backend that
# fails is reported (step, exit status, log lines) and the run goes on.
# BENCH_SCALE_ARGS="--smoke": N=1,5, ~1 min.
BENCH_SCALE_ARGS ?=

bench-scale: bench-deps build
	/usr/bin/python3 bench/scale.py $(BENCH_SCALE_ARGS)

# Thousands of pools (issue 23): 2,000 and 5,000 ondemand pools, rounds of
# 100 random pools, fpmd with warm_min_available = "100%" (no php process
# while idle, as php-fpm; the default would keep ~6 MiB per pool) and
# reloaded with `fpmd reload`; start and reload bounded at 15 minutes
# each; then the idle stop of 500 pools. bench/results/scale-large.json,
# .md and .png; 20-40 minutes, most of it fpmd's start and reload at 5,000.
bench-scale-large: bench-deps build
	/usr/bin/python3 bench/scale.py --pools 2000,5000 --modes ondemand \
		--warm-min-available 100% --fpmd-reload command \
		--start-timeout 900 --reload-timeout 900 \
		--out bench/results/scale-large.json --chart bench/results/scale-large.png \
		--markdown bench/results/scale-large.md \
		$(BENCH_SCALE_ARGS)

# 1 and 5 pools, idle timeout 2 s, the idle stop of 5 pools, into a temp dir
# removed when it passes (the test suite runs it, so that the scale bench
# cannot rot); ~1 min.
bench-scale-smoke: bench-deps build
	/usr/bin/python3 bench/scale.py --smoke $(BENCH_SCALE_ARGS)

# The manager's own memory with N idle ondemand pools (issue 23): fpmd's
# PSS against php-fpm's master for N in 1, 500, 2000, nothing started
# before a request; a table on stdout; about 3 minutes.
# BENCH_MEM_ARGS="--heaptrack DIR --backends fpmd": fpmd under heaptrack.
BENCH_MEM_ARGS ?=

bench-manager-mem: bench-deps build
	/usr/bin/python3 bench/manager_mem.py $(BENCH_MEM_ARGS)

# cargo fuzz targets (fuzz/): the codec, the proxy's request path against
# a fake child, and the configuration parser (the path of fpmd -t). Needs the nightly toolchain and cargo-fuzz (both
# installed by scripts/deps-fuzz.sh when missing).
#   make fuzz-smoke           each target for FUZZ_SECS (30) seconds, built
#                             --dev (fuzz/Cargo.toml: opt-level 1)
#   make fuzz FUZZ_RUNS=N     each target for N executions (the figure in
#                             the issue notes: 10 million)
.PHONY: fuzz-deps fuzz-smoke fuzz
FUZZ_SECS ?= 30
FUZZ_RUNS ?= 10000000

fuzz-deps:
	scripts/deps-fuzz.sh

fuzz-smoke: fuzz-deps
	cd fuzz && ./seeds.py corpus/request_path
	cd fuzz && ./config_seeds.py corpus/config
	cd fuzz && cargo +nightly fuzz run --dev codec -- -max_total_time=$(FUZZ_SECS) -print_final_stats=1
	cd fuzz && cargo +nightly fuzz run --dev request_path -- -max_total_time=$(FUZZ_SECS) -print_final_stats=1
	cd fuzz && cargo +nightly fuzz run --dev config -- -max_total_time=$(FUZZ_SECS) -print_final_stats=1

fuzz: fuzz-deps
	cd fuzz && ./seeds.py corpus/request_path
	cd fuzz && ./config_seeds.py corpus/config
	cd fuzz && cargo +nightly fuzz run codec -- -runs=$(FUZZ_RUNS) -print_final_stats=1
	cd fuzz && cargo +nightly fuzz run request_path -- -runs=$(FUZZ_RUNS) -print_final_stats=1
	cd fuzz && cargo +nightly fuzz run config -- -runs=$(FUZZ_RUNS) -print_final_stats=1

# php-src's own FPM test suite (sapi/fpm/tests of a PHP 8.2 source tree)
# with fpmd in php-fpm's place (scripts/php-src-fpm-tests.sh says how):
#   make php-src-fpm-tests PHP_SRC=/path/to/php-src
#   make php-src-fpm-tests PHP_SRC=... PHP_SRC_TESTS="status-*.phpt"
#   make php-src-fpm-tests PHP_SRC=... PHP_SRC_ARGS=--baseline   (Debian's php-fpm8.2)
PHP_SRC ?=
PHP_SRC_TESTS ?=
PHP_SRC_ARGS ?=

php-src-fpm-tests:
	@test -n "$(PHP_SRC)" || { echo "give PHP_SRC=/path/to/php-src" >&2; exit 2; }
	cargo build --bin fpmd
	DEPS_ONLY=1 scripts/deps.sh php-cli acl   # the tests' PHP; getfacl for socket-uds-acl
	scripts/php-src-fpm-tests.sh $(PHP_SRC_ARGS) $(PHP_SRC) $(PHP_SRC_TESTS)
