#!/usr/bin/env bash
# make demo: fpmd with the default pool (pool.d/www.toml) behind nginx.
# Ctrl-C stops both; fpmd stops its php-cgi children on the way out.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
if [ "$(id -u)" != 0 ]; then
    echo "the demo runs pools as www-data and listens on /run/fpmd: it needs root (sudo make demo)" >&2
    exit 1
fi
chmod o+rx "$repo" "$repo/demo" "$repo/demo/www" 2>/dev/null || true
run=$(mktemp -d /tmp/fpmd-demo.XXXXXX)
port=8080
while (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do port=$((port + 1)); done
sock=$(sed -n 's/^listen.address *= *"\(.*\)"/\1/p' pool.d/www.toml)
mkdir -p "$run"/{body,fastcgi,proxy,uwsgi,scgi}
mkdir -p "$(dirname "$sock")"   # fpmd does not create the socket's directory
cat >"$run/nginx.conf" <<NGINX
daemon off;
master_process off;
worker_processes 1;
pid $run/nginx.pid;
error_log $run/nginx-error.log;
events { worker_connections 256; }
http {
    access_log off;
    client_body_temp_path $run/body;
    fastcgi_temp_path $run/fastcgi;
    proxy_temp_path $run/proxy;
    uwsgi_temp_path $run/uwsgi;
    scgi_temp_path $run/scgi;
    upstream fpmd { server unix:$sock; keepalive 8; }
    server {
        listen 127.0.0.1:$port;
        root $repo/demo/www;
        index index.php;
        location ~ \.php\$ {
            try_files \$uri =404;
            include /etc/nginx/fastcgi_params;
            fastcgi_param SCRIPT_FILENAME \$document_root\$fastcgi_script_name;
            fastcgi_keep_conn on;
            fastcgi_pass fpmd;
        }
    }
}
NGINX
pids=()
cleanup() {
    trap - INT TERM EXIT
    for p in "${pids[@]}"; do kill -INT "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$run"
    echo "demo stopped"
}
trap cleanup INT TERM EXIT
./target/release/fpmd -c fpmd.toml &
pids+=($!)
for _ in $(seq 50); do [ -S "$sock" ] && break; sleep 0.1; done
[ -S "$sock" ] || { echo "fpmd did not start" >&2; exit 1; }
nginx -p "$run" -c "$run/nginx.conf" &
pids+=($!)
sleep 0.3
echo
echo "fpmd demo: open http://127.0.0.1:$port/ (Ctrl-C to stop)"
echo
wait -n "${pids[@]}" || true
