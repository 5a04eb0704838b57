#!/usr/bin/env bash
# Instructions fpmd itself executes per request (callgrind counts, which do
# not drift with machine load): fpmd runs under valgrind behind nginx, once
# with N1 and once with N2 requests of hello.php; the difference of the two
# totals divided by N2-N1 is the per-request cost of the hop (parsing,
# dispatch, forwarding, syscalls issued), start-up excluded.
# Usage: bench/instructions.sh [N1] [N2]      (defaults 300 1300)
# KEEPALIVE=0 drops nginx's upstream keepalive (a connection per request).
set -euo pipefail
cd "$(dirname "$0")/.."
n1=${1:-300}
n2=${2:-1300}
command -v valgrind >/dev/null || { echo "valgrind missing: apt-get install valgrind" >&2; exit 1; }
cargo build --release -q
dir=$(mktemp -d /tmp/fpmd-instr.XXXXXX)
chmod 755 "$dir"
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
mkdir -p "$dir/www" "$dir/pool.d" "$dir"/{body,fastcgi,proxy,uwsgi,scgi}
echo '<?php echo "hello\n";' >"$dir/www/hello.php"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$dir/fpmd.toml" <<TOML
[global]
error_log = "$dir/fpmd.log"
include = "pool.d/*.toml"
TOML
cat >"$dir/pool.d/bench.toml" <<TOML
[bench]
user = "www-data"
group = "www-data"
listen.address = "$dir/fpmd.sock"
pm.max_children = 4
${FPMD_SPAWN:+pm.spawn = \"$FPMD_SPAWN\"}
TOML
ka_upstream="keepalive 8;"; ka_location="fastcgi_keep_conn on;"
if [ "${KEEPALIVE:-1}" = 0 ]; then ka_upstream=""; ka_location=""; fi
cat >"$dir/nginx.conf" <<NGINX
daemon off; master_process off; worker_processes 1; pid $dir/nginx.pid; error_log $dir/nginx.err;
events { worker_connections 256; }
http { access_log off; client_body_temp_path $dir/body; fastcgi_temp_path $dir/fastcgi; proxy_temp_path $dir/proxy;
  uwsgi_temp_path $dir/uwsgi; scgi_temp_path $dir/scgi;
  upstream php { server unix:$dir/fpmd.sock; ${ka_upstream} }
  server { listen 127.0.0.1:$port; root $dir/www;
    location ~ \.php\$ { include /etc/nginx/fastcgi_params; fastcgi_param SCRIPT_FILENAME \$document_root\$fastcgi_script_name;
      ${ka_location} fastcgi_pass php; } } }
NGINX
nginx -p "$dir" -c "$dir/nginx.conf" &
run() {
    local n=$1 out="$dir/callgrind.$1"
    valgrind --tool=callgrind --callgrind-out-file="$out" target/release/fpmd -c "$dir/fpmd.toml" 2>"$dir/valgrind.$n.log" &
    local vg=$!
    for _ in $(seq 200); do [ -S "$dir/fpmd.sock" ] && break; sleep 0.1; done
    python3 - "$port" "$n" <<'PY'
import http.client, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
for i in range(n):
    c.request("GET", "/hello.php")
    r = c.getresponse()
    body = r.read()
    if r.status != 200:
        sys.exit(f"request {i}: status {r.status}")
PY
    kill -TERM "$vg"
    wait "$vg" || true
    rm -f "$dir/fpmd.sock"
    grep -m1 '^summary:' "$out" | awk '{print $2}'
}
i1=$(run "$n1")
i2=$(run "$n2")
per=$(( (i2 - i1) / (n2 - n1) ))
echo "fpmd instructions: $i1 for $n1 requests, $i2 for $n2 requests"
echo "instructions per request added by fpmd (user space): $per"
