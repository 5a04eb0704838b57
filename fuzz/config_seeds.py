#!/usr/bin/env python3
"""Seed inputs for fuzz/config: the repository's pool files, the TOML
examples of the README, and the TOML found in string literals of the
configuration's unit tests and the integration tests, each as a main file
alone and as a pool file included by a main file (files are separated by a
NUL byte, see fuzz_targets/config.rs). Nothing here is committed but this
script; the corpus directory is ignored by git.
Usage: fuzz/config_seeds.py DIR (run from fuzz/)"""
import codecs, glob, hashlib, os, re, sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
MAIN_INCLUDE = b'[global]\ninclude = "pool.d/*.toml"\n'
# A pool that validates on any Debian machine with fpmd's test set-up.
VALID = b'''[www]
user = "nobody"
group = "nogroup"
php_cgi = "/bin/sh"
listen.address = "/run/fpmd/www.sock"
pm.mode = "dynamic"
pm.max_children = 5
pm.start_servers = 2
pm.min_spare_servers = 1
pm.max_spare_servers = 3
clear_env = false
env.FOO = "$PATH"
php_admin_value.memory_limit = "128M"
php_value."session.save_path" = "/tmp"
php_flag.display_errors = "off"
access.log = "log/www.access.log"
access.format = "%R - %u %t \\"%m %r\\" %s %{mili}d"
request_terminate_timeout = "60s"
pm.status_path = "/status"
ping.path = "/ping"
'''

def texts():
    for p in sorted(glob.glob(os.path.join(ROOT, "pool.d", "*.toml"))):
        yield open(p, "rb").read()
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    for block in re.findall(r"```toml\n(.*?)```", readme, re.S):
        yield block.encode()
    sources = glob.glob(os.path.join(ROOT, "src", "config", "*.rs")) + glob.glob(os.path.join(ROOT, "tests", "it", "*.rs"))
    for p in sorted(sources):
        code = open(p, encoding="utf-8").read()
        for lit in re.findall(r'r#"(.*?)"#', code, re.S):
            if "=" in lit and "[" in lit:
                yield lit.encode()
        for lit in re.findall(r'"((?:[^"\\\n]|\\.)*\\n(?:[^"\\\n]|\\.)*)"', code):
            if "=" in lit:
                try:
                    yield codecs.decode(lit, "unicode_escape").encode()
                except Exception:
                    pass

def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    seeds = {VALID, MAIN_INCLUDE + b"\0" + VALID}
    for t in texts():
        seeds.add(t)
        if b"[global]" not in t:
            seeds.add(MAIN_INCLUDE + b"\0" + t)
    for s in seeds:
        with open(os.path.join(out, hashlib.sha1(s).hexdigest()), "wb") as f:
            f.write(s)
    print(f"{len(seeds)} seeds in {out}")

main()
