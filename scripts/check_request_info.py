#!/usr/bin/env python3
"""Runs the table of src/request_info.rs through the real php-fpm and php-cgi.

For every row it sends the row's PARAMS to php-fpm and checks $_SERVER
against the row's expected php-fpm result; sends the PARAMS fpmd plans for
php-cgi to php-cgi and checks the same; and, where the row states what
php-cgi makes of the unedited PARAMS, checks that too. Rows use /srv as the
root; here it is a temporary directory holding the same tree as the test's
MapFs (keep the two in step).

Needs php-fpm8.2 (or PHP_FPM=...) and php-cgi (or PHP_CGI=...); run as
root, the php-fpm pools run as nobody, else as the current user. Usage:
scripts/check_request_info.py (it runs `cargo test --lib
request_info::tests::dump_rows_for_real_php -- --ignored`). Prints one line
per check and exits 1 when one fails. Rows where php-cgi 8.2.32 reads out of
bounds only print what the installed php-cgi did.
"""
import json, os, socket, struct, subprocess, sys, tempfile, time

PHP_FPM = os.environ.get('PHP_FPM', 'php-fpm8.2')
PHP_CGI = os.environ.get('PHP_CGI', 'php-cgi')
DUMPER = r"""<?php
$k = ['SCRIPT_FILENAME','PATH_INFO','PATH_TRANSLATED','SCRIPT_NAME','ORIG_SCRIPT_FILENAME','ORIG_PATH_INFO','ORIG_PATH_TRANSLATED','ORIG_SCRIPT_NAME','REDIRECT_URL','PHP_SELF'];
$o = ['__FILE__' => __FILE__];
foreach ($k as $n) { if (array_key_exists($n, $_SERVER)) $o[$n] = $_SERVER[$n]; }
echo json_encode($o, JSON_UNESCAPED_SLASHES), "\n";
"""
TREE = ['www/index.php', 'www/a..b.php', 'www/uploads/a.jpg', 'www/sub/x.php', 'cgi-bin/php']
WRITTEN = ['SCRIPT_FILENAME', 'PATH_INFO', 'PATH_TRANSLATED', 'SCRIPT_NAME', 'ORIG_SCRIPT_FILENAME', 'ORIG_PATH_INFO', 'ORIG_PATH_TRANSLATED', 'ORIG_SCRIPT_NAME']


def free_port():
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(port):
    for _ in range(100):
        try:
            socket.create_connection(('127.0.0.1', port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f'nothing listens on {port}')


def rec(t, content):
    return struct.pack('>BBHHBB', 1, t, 1, len(content), 0, 0) + content


def pair(n, v):
    out = b''
    for l in (len(n), len(v)):
        out += bytes([l]) if l < 128 else struct.pack('>I', l | 0x80000000)
    return out + n + v


def request(port, params):
    """(status, body) or ('reset', '') when the process went away."""
    body = b''.join(pair(n.encode('latin1'), v.encode('latin1')) for n, v in [('REQUEST_METHOD', 'GET')] + params)
    msg = rec(1, struct.pack('>HB5x', 1, 0)) + rec(4, body) + rec(4, b'') + rec(5, b'')
    try:
        s = socket.create_connection(('127.0.0.1', port), timeout=5)
        s.sendall(msg)
        data = b''
        while True:
            c = s.recv(65536)
            if not c:
                break
            data += c
        s.close()
    except ConnectionResetError:
        return 'reset', ''
    out, i, ended = b'', 0, False
    while i + 8 <= len(data):
        _, t, _, cl, pl, _ = struct.unpack('>BBHHBB', data[i:i + 8])
        if t == 6:
            out += data[i + 8:i + 8 + cl]
        ended |= t == 3
        i += 8 + cl + pl
    if not ended:
        return 'reset', ''
    head, _, text = out.partition(b'\r\n\r\n')
    status = '200'
    for line in head.split(b'\r\n'):
        if line.lower().startswith(b'status:'):
            status = line.split(b':', 1)[1].strip().decode()
    return status, text.decode('latin1').strip()


class Cgi:
    """A php-cgi -b server, restarted when a request kills it."""

    def __init__(self, args):
        self.args, self.proc = args, None
        self.start()

    def start(self):
        self.port = free_port()
        self.proc = subprocess.Popen([PHP_CGI, '-n'] + self.args + ['-b', f'127.0.0.1:{self.port}'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port)

    def request(self, params):
        r = request(self.port, params)
        if self.proc.poll() is not None:
            self.start()
        return r

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def fpm_pool(tmp, name, extra):
    port = free_port()
    conf = os.path.join(tmp, f'{name}.conf')
    root = os.geteuid() == 0
    with open(conf, 'w') as f:
        f.write(f"[global]\npid = {tmp}/{name}.pid\nerror_log = {tmp}/{name}.log\ndaemonize = no\n[www]\n")
        if root:
            f.write("user = nobody\ngroup = nogroup\n")
        f.write(f"listen = 127.0.0.1:{port}\npm = static\npm.max_children = 1\nsecurity.limit_extensions = \"\"\n{extra}")
    proc = subprocess.Popen([PHP_FPM, '-n', '-F', '-y', conf] + (['-R'] if root else []), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port)
    return proc, port


def main():
    dump = subprocess.run(['cargo', 'test', '--lib', 'request_info::tests::dump_rows_for_real_php', '--', '--ignored', '--nocapture'], capture_output=True, text=True, check=True).stdout
    rows = [json.loads(l[4:]) for l in dump.splitlines() if l.startswith('ROW ')]
    tmp = tempfile.mkdtemp(prefix='reqinfo-check-')
    os.chmod(tmp, 0o755)
    for p in TREE:
        os.makedirs(os.path.dirname(os.path.join(tmp, p)), exist_ok=True)
        with open(os.path.join(tmp, p), 'w') as f:
            f.write(DUMPER)
    subprocess.run(['chmod', '-R', 'a+rX', tmp], check=True)

    def sub(s):
        return s.replace('/srv/', tmp + '/') if s != '/srv' else tmp

    # One php-fpm pool and one php-cgi per (cgi.fix_pathinfo, cgi.discard_path).
    fpms, cgis = {}, {}
    for fix, discard in [(True, False), (False, False), (False, True)]:
        ini = {'cgi.fix_pathinfo': int(fix), 'cgi.discard_path': int(discard)}
        fpms[fix, discard] = fpm_pool(tmp, f'pool{int(fix)}{int(discard)}', ''.join(f'php_admin_value[{k}] = {v}\n' for k, v in ini.items()))
        cgis[fix, discard] = Cgi([a for k, v in ini.items() for a in ('-d', f'{k}={v}')])
    failed = 0

    def check(what, row, expected, sapi, got):
        nonlocal failed
        exp = {k: sub(v) for k, v in expected}
        p = exp.get('path_translated')
        if p is None:
            want = ('404 Not Found', 'File not found.' if sapi == 'fpm' else 'No input file specified.')
        elif p == '':
            want = ('reset', '')
        elif os.path.isfile(p):
            want = None
        else:
            want = ('404 Not Found', 'No input file specified.')
        if want is not None:
            ok = got == want
        else:
            try:
                body = json.loads(got[1])
            except ValueError:
                body = None
            pi = exp.get('PATH_INFO', '') if row['fix_pathinfo'] else ''
            ok = (got[0] == '200' and body is not None and body.get('__FILE__') == os.path.realpath(p)
                  and all(body.get(k) == exp.get(k) for k in WRITTEN) and body.get('PHP_SELF') == exp.get('request_uri', '') + pi)
            want = {k: exp[k] for k in WRITTEN if k in exp}
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {what:<9} {row['name']}")
        if not ok:
            print(f'     want {want}\n     got  {got}')

    for row in rows:
        fpm_port = fpms[row['fix_pathinfo'], row['discard_path']][1]
        cgi = cgis[row['fix_pathinfo'], row['discard_path']]
        inp = [(n, sub(v)) for n, v in row['input']]
        check('php-fpm', row, row['fpm'], 'fpm', request(fpm_port, inp))
        if row['action'] == 'Forward':
            check('plan', row, row['fpm'], 'cgi', cgi.request([(n, sub(v)) for n, v in row['planned']]))
        if row['cgi'] == 'undefined':
            print(f"info php-cgi   {row['name']}: unedited PARAMS (out of bounds in 8.2.32's php-cgi) gave {cgi.request(inp)}")
        elif row['cgi'] is not None:
            check('php-cgi', row, row['cgi'], 'cgi', cgi.request(inp))
    for cgi in cgis.values():
        cgi.stop()
    for proc, _ in fpms.values():
        proc.terminate()
        proc.wait()
    subprocess.run(['rm', '-rf', tmp])
    sys.exit(1 if failed else 0)


if __name__ == '__main__':
    main()
