<?php
// host.php?ms=N: sleeps N ms, then prints "host NAME", NAME from the
// FPMD_HOST environment variable of the pool (the drain test's two hosts).
header('Content-Type: text/plain');
usleep(1000 * (int)($_GET['ms'] ?? 0));
echo 'host ', getenv('FPMD_HOST') ?: '?';
