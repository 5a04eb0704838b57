<?php
// usage.php?mb=N&cpu_ms=M: holds an N MiB string, then burns M ms of CPU
// (a loop on the clock, no sleep), and prints "ok".
$s = str_repeat('x', ((int)($_GET['mb'] ?? 0)) << 20);
$until = microtime(true) + ((int)($_GET['cpu_ms'] ?? 0)) / 1000;
$n = 0;
while (microtime(true) < $until) {
    $n++;
}
echo "ok ", strlen($s), "\n";
