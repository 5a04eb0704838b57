#!/usr/bin/env python3
"""Seed inputs for fuzz/request_path: well-formed and near-well-formed web
server streams (byte 0 = how the fake child answers), so the fuzzer starts
inside the exchange instead of at the 404 of a missing script.
Usage: fuzz/seeds.py DIR"""
import os, struct, sys

def rec(t, i, c=b"", pad=b""):
    return struct.pack(">BBHHBB", 1, t, i, len(c), len(pad), 0) + c + pad

def nv(n, v):
    l = lambda x: bytes([len(x)]) if len(x) < 128 else struct.pack(">I", len(x) | 0x80000000)
    return l(n) + l(v) + n + v

def request(i=1, keep=0, cl=None, body=b"", pad=b"", end=True, extra=()):
    p = nv(b"SCRIPT_FILENAME", b"/etc/passwd") + nv(b"REQUEST_URI", b"/x.php") + nv(b"REQUEST_METHOD", b"POST")
    if cl is not None:
        p += nv(b"CONTENT_LENGTH", cl)
    for k, v in extra:
        p += nv(k, v)
    s = rec(1, i, struct.pack(">HB5x", 1, keep)) + rec(4, i, p) + rec(4, i, b"", pad)
    for k in range(0, len(body), 4000):
        s += rec(5, i, body[k:k + 4000], pad[:3])
    if end:
        s += rec(5, i, b"", pad)
    return s

seeds = {
    "get": request(),
    "post": request(cl=b"5", body=b"hello"),
    "excess": request(cl=b"3", body=b"hello"),
    "chunked": request(body=b"chunked body"),
    "until_end": request(cl=b"-1", body=b"x" * 9000),
    "short": request(cl=b"100", body=b"abc"),
    "aborted": request(cl=b"100000", body=b"y" * 300000, end=False),
    "padding": request(cl=b"2", body=b"ab", pad=request(i=2)[:255]),
    "keepalive": request(keep=1) + request(i=2, keep=1, cl=b"1", body=b"z"),
    "get_values": rec(9, 0, nv(b"FCGI_MPXS_CONNS", b"") * 50) + request(),
    "apache": request(extra=((b"SCRIPT_FILENAME", b"proxy:fcgi://localhost/etc/passwd/a/b"), (b"SCRIPT_NAME", b"/passwd/a/b"))),
    "abort": request(cl=b"10", body=b"12345", end=False) + rec(2, 1),
    "second_begin": request(end=True) + rec(1, 2, struct.pack(">HB5x", 1, 0)),
}
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
for mode in range(4):
    for name, data in seeds.items():
        with open(os.path.join(out, f"{name}-{mode}"), "wb") as f:
            f.write(bytes([mode]) + data)
