<?php
// barrier.php?group=G&name=N&n=K: writes run/G.N, then waits (up to 30 s)
// until K files run/G.* exist, i.e. K requests run at the same time, and
// prints "met N" (or "alone N" when they never did).
header('Content-Type: text/plain');
$group = basename($_GET['group'] ?? 'b');
$name = basename($_GET['name'] ?? (string)getmypid());
$n = (int)($_GET['n'] ?? 1);
file_put_contents(__DIR__ . "/run/$group.$name", (string)getmypid());
$end = microtime(true) + 30;
while (count(glob(__DIR__ . "/run/$group.*")) < $n && microtime(true) < $end) {
    usleep(10000);
}
echo count(glob(__DIR__ . "/run/$group.*")) >= $n ? "met $name" : "alone $name";
