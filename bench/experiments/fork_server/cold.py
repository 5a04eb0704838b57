"""An experiment for issue 23 (not part of fpmd): how long a cold request
takes when php-cgi is exec'd for it, and when a loaded php-cgi parent forks
a child on order (forkserver.so preloaded). Usage: make forkserver.so
(gcc -O2 -shared -fPIC -o forkserver.so forkserver.c -ldl), then
python3 cold.py [SCRIPT]."""
import os, socket, struct, subprocess, time, signal, statistics, sys, tempfile
HERE = os.path.dirname(os.path.abspath(__file__))
TMP = tempfile.mkdtemp(prefix='fork-server-')
def rec(t, rid, body): return struct.pack('>BBHHBB', 1, t, rid, len(body), 0, 0) + body
def nv(k, v):
    ln = lambda x: bytes([len(x)]) if len(x) < 128 else struct.pack('>I', len(x) | 0x80000000)
    return ln(k) + ln(v) + k + v
SCRIPT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '../../php/hello.php'))
params = {b'SCRIPT_FILENAME': SCRIPT.encode(), b'REQUEST_METHOD': b'GET', b'SCRIPT_NAME': b'/x.php', b'REQUEST_URI': b'/x.php', b'QUERY_STRING': b'', b'SERVER_PROTOCOL': b'HTTP/1.1', b'GATEWAY_INTERFACE': b'CGI/1.1'}
REQ = rec(1, 1, struct.pack('>HB5x', 1, 0)) + rec(4, 1, b''.join(nv(k, v) for k, v in params.items())) + rec(4, 1, b'') + rec(5, 1, b'')
def request(path, wait=True):
    while True:
        try:
            s = socket.socket(socket.AF_UNIX); s.connect(path); break
        except (FileNotFoundError, ConnectionRefusedError):
            s.close(); time.sleep(0.0005)
    s.sendall(REQ); buf = b''
    while True:
        d = s.recv(65536)
        if not d: break
        buf += d
        if b'\x01\x03\x00\x01' in buf: break
    s.close(); assert b'\x01\x06' in buf, buf[:100]
def pct(xs): xs = sorted(xs); return f"p50 {statistics.median(xs)*1000:.2f} ms  p99 {xs[int(len(xs)*0.99)-1]*1000:.2f} ms  max {xs[-1]*1000:.2f} ms"
N = 60
# exec cold: a php-cgi is started for the request
ex = []
for i in range(N):
    p = os.path.join(TMP, f'e{i}.sock')
    t0 = time.perf_counter()
    proc = subprocess.Popen(['php-cgi', '-b', p], env=dict(os.environ, PHP_FCGI_CHILDREN='0'))
    request(p); ex.append(time.perf_counter() - t0)
    proc.terminate(); proc.wait(); os.unlink(p) if os.path.exists(p) else None
print('exec cold:      ', pct(ex))
# fork cold: a loaded php-cgi parent forks one child on order
a, b = socket.socketpair()
path = os.path.join(TMP, 'f.sock')
if os.path.exists(path): os.unlink(path)
env = dict(os.environ, PHP_FCGI_CHILDREN='100000', LD_PRELOAD=os.path.join(HERE, 'forkserver.so'), FPMD_FORK_FD=str(b.fileno()))
parent = subprocess.Popen(['php-cgi', '-b', path], env=env, pass_fds=[b.fileno()])
time.sleep(1.0)
fk = []; warm = []
for i in range(N):
    t0 = time.perf_counter()
    a.send(b'!'); pid = struct.unpack('i', a.recv(4))[0]
    request(path); fk.append(time.perf_counter() - t0)
    t0 = time.perf_counter(); request(path); warm.append(time.perf_counter() - t0)
    os.kill(pid, signal.SIGTERM); time.sleep(0.01)
print('fork cold:      ', pct(fk))
print('warm (same child):', pct(warm))
parent.terminate(); parent.wait()
# php-fpm ondemand: the first request after its only child retired
fpm = '/usr/sbin/php-fpm' + subprocess.run(['php', '-r', 'echo PHP_MAJOR_VERSION, ".", PHP_MINOR_VERSION;'], capture_output=True, text=True).stdout.strip()
conf = os.path.join(TMP, 'php-fpm.conf'); sock = os.path.join(TMP, 'fpm.sock')
with open(conf, 'w') as f:
    f.write(f"[global]\nerror_log = {TMP}/fpm.log\ndaemonize = no\n[www]\nlisten = {sock}\n"
            "pm = ondemand\npm.max_children = 1\npm.process_idle_timeout = 1s\n")
fpmp = subprocess.Popen([fpm, '-R', '-y', conf])
time.sleep(1.0)
pf = []
for i in range(20):
    time.sleep(1.6)  # past pm.process_idle_timeout: no child
    t0 = time.perf_counter(); request(sock); pf.append(time.perf_counter() - t0)
print('php-fpm ondemand cold:', pct(pf))
fpmp.terminate(); fpmp.wait()
