<?php
// leak.php: leaks 5 MiB that outlive the request (malloc() through FFI, never
// freed, every page written), then prints "<pid> <VmRSS in KiB>".
// Needs ffi.enable = 1 (Debian's default, "preload", refuses FFI::cdef).
header('Content-Type: text/plain');
$ffi = FFI::cdef("void *malloc(size_t); void *memset(void *, int, size_t);");
$p = $ffi->malloc(5 << 20);
$ffi->memset($p, 1, 5 << 20);
preg_match('/^VmRSS:\s+(\d+) kB/m', file_get_contents('/proc/self/status'), $m);
printf("%d %d", getmypid(), (int)$m[1]);
