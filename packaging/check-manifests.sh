#!/bin/sh
# Checks the container recipe and the Kubernetes manifests with what runs
# on this machine (no Docker daemon, no cluster):
#   packaging/check-manifests.sh [FPMD_BINARY]   (default: the release build)
# - hadolint lints packaging/docker/Dockerfile, and every file it COPYs
#   from the repository exists;
# - kubernetes-validate --strict checks each manifest against Kubernetes'
#   schemas (unknown fields are errors);
# - the manifests agree with each other and with the image (python3: the
#   ConfigMap's fpmd.toml is packaging/docker/fpmd.toml, ports, probe
#   paths, annotations, Service targets, users);
# - `fpmd -t` accepts that fpmd.toml run as www-data (uid 33), as the
#   container runs it, and `nginx -t` the sidecar's server block;
# - the image's health check, packaging/docker/fpmd-ping, answers 0 from a
#   real fpmd started on that configuration (on free ports, as www-data)
#   and non-zero where nothing listens.
# The tools come from scripts/deps-deb.sh --checks (make test-deps):
# kubernetes-validate and hadolint in the virtualenv $FPMD_TOOLS
# (default ~/.cache/fpmd-tools).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-${CARGO_TARGET_DIR:-$here/../target}/release/fpmd}
tools=${FPMD_TOOLS:-$HOME/.cache/fpmd-tools}
hint="scripts/deps-deb.sh --checks (make test-deps) installs it"
[ -x "$bin" ] || { echo "check-manifests.sh: no fpmd binary at $bin (make build first)" >&2; exit 1; }
for tool in "$tools/bin/kubernetes-validate" "$tools/bin/hadolint" /usr/bin/python3 nginx cgi-fcgi setpriv unshare; do
	command -v "$tool" >/dev/null || { echo "check-manifests.sh: $tool not found: $hint" >&2; exit 1; }
done
/usr/bin/python3 -c 'import yaml, tomllib' 2>/dev/null || { echo "check-manifests.sh: python3-yaml missing: $hint" >&2; exit 1; }
work=$(mktemp -d /tmp/fpmd-check-manifests.XXXXXX)
chmod 755 "$work"
fpmd_pid=""
trap '[ -z "$fpmd_pid" ] || kill -KILL "$fpmd_pid" 2>/dev/null; rm -rf "$work"' EXIT
status=0
fail() { echo "FAILED: $*"; status=1; }
ok() { echo "ok: $*"; }
docker=$here/docker
kube=$here/kubernetes

if out=$("$tools/bin/hadolint" "$docker/Dockerfile" 2>&1); then ok "hadolint Dockerfile"; else fail "hadolint: $out"; fi
for src in $(awk '$1 == "COPY" && $2 !~ /^--from/ && $2 != "." { print $2 }' "$docker/Dockerfile"); do
	[ -e "$here/../$src" ] || fail "the Dockerfile copies $src, which does not exist"
done

if out=$("$tools/bin/kubernetes-validate" --strict --quiet "$kube"/configmap.yaml "$kube"/deployment.yaml "$kube"/service.yaml 2>&1) && [ -z "$out" ]; then
	ok "kubernetes-validate --strict ($("$tools/bin/kubernetes-validate" --version))"
else
	fail "kubernetes-validate: $out"
fi

# Cross-checks; writes the ConfigMap's files into $work for the next steps.
if /usr/bin/python3 - "$here" "$work" <<'EOF'; then ok "the manifests agree with each other and with the image"; else fail "the manifests disagree (above)"; fi
import re, sys, tomllib, yaml
here, work = sys.argv[1], sys.argv[2]
errors = []
def check(cond, what):
    if not cond:
        errors.append(what)
docs = {}
for name in ["configmap", "deployment", "service", "kustomization"]:
    for d in yaml.safe_load_all(open(f"{here}/kubernetes/{name}.yaml")):
        docs[d["kind"]] = d
check(set(docs) == {"ConfigMap", "Deployment", "Service", "Kustomization"}, f"kinds: {sorted(docs)}")
check(sorted(docs["Kustomization"]["resources"]) == ["configmap.yaml", "deployment.yaml", "service.yaml"], "kustomization resources")
cm = docs["ConfigMap"]["data"]
image_toml = open(f"{here}/docker/fpmd.toml").read()
check(cm["fpmd.toml"] == image_toml, "the ConfigMap's fpmd.toml is not packaging/docker/fpmd.toml")
open(f"{work}/fpmd.toml", "w").write(cm["fpmd.toml"])
open(f"{work}/default.conf", "w").write(cm["default.conf"])
conf = tomllib.loads(cm["fpmd.toml"])
pool = conf["www"]
port = lambda a: int(str(a).rsplit(":", 1)[-1])
spec = docs["Deployment"]["spec"]
pod = spec["template"]
check(pod["metadata"]["labels"] == spec["selector"]["matchLabels"], "selector")
check(docs["Service"]["spec"]["selector"] == spec["selector"]["matchLabels"], "Service selector")
c = {x["name"]: x for x in pod["spec"]["containers"]}
fpmd, nginx = c["fpmd"], c["nginx"]
fports = {p["name"]: p["containerPort"] for p in fpmd["ports"]}
nports = {p["name"]: p["containerPort"] for p in nginx["ports"]}
check(fports["fastcgi"] == port(pool["listen"]["address"]), "fastcgi port != listen.address")
check(fports["metrics"] == port(conf["global"]["metrics"]["listen"]), "metrics port != metrics.listen")
ann = pod["metadata"]["annotations"]
check(ann["prometheus.io/scrape"] == "true", "prometheus.io/scrape")
check(int(ann["prometheus.io/port"]) == fports["metrics"], "prometheus.io/port != the metrics port")
check(ann["prometheus.io/path"] == "/metrics", "prometheus.io/path")
check(nginx["readinessProbe"]["httpGet"]["path"] == pool["ping"]["path"], "readiness path != ping.path")
check(nginx["readinessProbe"]["httpGet"]["port"] in nports, "readiness port is not an nginx port")
status_port = port(pool["pm"]["status_listen"])
nconf = cm["default.conf"]
check(re.search(r"location = %s \{[^}]*fastcgi_pass 127\.0\.0\.1:%d;" % (re.escape(pool["ping"]["path"]), status_port), nconf), "nginx's ping location does not reach pm.status_listen")
check(f"listen {nports['http']};" in nconf, "nginx listens elsewhere than its container port")
check(f"fastcgi_pass 127.0.0.1:{fports['fastcgi']};" in nconf, "nginx does not pass to listen.address")
for probe in ("readinessProbe", "livenessProbe"):
    check(fpmd[probe]["exec"]["command"] == ["/usr/local/bin/fpmd-ping"], f"fpmd {probe}")
allp = {**fports, **nports}
for p in docs["Service"]["spec"]["ports"]:
    check(p["targetPort"] in allp, f"Service port {p['name']} targets no container port")
check(status_port not in [allp.get(p["targetPort"]) for p in docs["Service"]["spec"]["ports"]], "the Service exposes the status listener")
dockerfile = open(f"{here}/docker/Dockerfile").read()
user = re.search(r"^USER (\d+):(\d+)$", dockerfile, re.M)
check(user and int(user.group(1)) == fpmd["securityContext"]["runAsUser"] == 33, "USER of the image != runAsUser 33 (www-data)")
check(re.search(r'^HEALTHCHECK .*CMD \["/usr/local/bin/fpmd-ping"\]$', dockerfile, re.M), "HEALTHCHECK is not fpmd-ping")
check("COPY packaging/docker/fpmd.toml /etc/fpmd/fpmd.toml" in dockerfile, "the image's configuration")
check(conf["global"]["error_log"] == "stderr", "the container's log is not stderr")
mounts = {m["mountPath"] for m in fpmd["volumeMounts"]}
check(conf["global"]["control_socket"].rsplit("/", 1)[0] in mounts, "the control socket's directory is not a writable volume")
for e in errors:
    print("  " + e)
sys.exit(1 if errors else 0)
EOF

# fpmd -t as the container runs it: as www-data, in a mount namespace with
# an empty /run/fpmd (the emptyDir, or the image's directory).
run_as_www() {
	unshare --mount --propagation private sh -c 'mount -t tmpfs -o mode=0755 none /run && mkdir /run/fpmd && chown 33:33 /run/fpmd && exec setpriv --reuid=33 --regid=33 --clear-groups "$@"' sh "$@"
}
if run_as_www "$bin" -t -c "$work/fpmd.toml" >"$work/t.out" 2>&1; then
	ok "fpmd -t accepts the container's fpmd.toml as www-data"
else
	fail "fpmd -t, as www-data, on the container's fpmd.toml:"
	cat "$work/t.out"
fi

mkdir "$work/nginx"
# The server block includes fastcgi_params as nginx images ship it; Debian's
# is the same file.
cp /etc/nginx/fastcgi_params "$work/nginx/"
printf 'pid %s/nginx/nginx.pid;\nevents {}\nhttp {\n    include %s/default.conf;\n}\n' "$work" "$work" >"$work/nginx/nginx.conf"
if out=$(nginx -t -q -e stderr -p "$work/nginx" -c "$work/nginx/nginx.conf" 2>&1) && [ -z "$out" ]; then
	ok "nginx -t accepts the sidecar's server block"
else
	fail "nginx -t on the sidecar's default.conf: $out"
fi

# The health check against a real fpmd on that configuration, moved to
# free ports (and the control socket into $work).
ports=$(/usr/bin/python3 -c '
import socket
ss = [socket.socket() for _ in range(3)]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))')
set -- $ports
sed -e "s#^listen.address = \"9000\"#listen.address = \"127.0.0.1:$1\"#" \
	-e "s#^pm.status_listen = \"127.0.0.1:9001\"#pm.status_listen = \"127.0.0.1:$2\"#" \
	-e "s#^metrics.listen = \"9253\"#metrics.listen = \"127.0.0.1:$3\"#" \
	-e "s#^control_socket = .*#control_socket = \"$work/fpmd.sock\"#" \
	"$work/fpmd.toml" >"$work/live.toml"
grep -q "127.0.0.1:$2" "$work/live.toml" || fail "could not move the status listener to a free port"
chmod 644 "$work/live.toml"
chown 33:33 "$work"
setpriv --reuid=33 --regid=33 --clear-groups "$bin" -c "$work/live.toml" >"$work/live.log" 2>&1 &
fpmd_pid=$!
i=0
until grep -q 'ready to handle connections' "$work/live.log" || [ $i -ge 100 ]; do sleep 0.1; i=$((i + 1)); done
if "$docker/fpmd-ping" "127.0.0.1:$2"; then ok "fpmd-ping answers 0 from fpmd's ping"; else
	fail "fpmd-ping against fpmd on 127.0.0.1:$2; fpmd's log:"
	cat "$work/live.log"
fi
kill -QUIT "$fpmd_pid"
wait "$fpmd_pid" || fail "fpmd exited $? after SIGQUIT"
fpmd_pid=""
if "$docker/fpmd-ping" "127.0.0.1:$2" 2>/dev/null; then fail "fpmd-ping answers 0 with no fpmd"; else ok "fpmd-ping fails where nothing listens"; fi

echo "Docker itself is not run here (no daemon): the image is linted, not built."
[ $status = 0 ] && echo "check-manifests.sh: all checks passed" || echo "check-manifests.sh: FAILED"
exit $status
