<?php
// usleep.php?ms=N[&mark=NAME][&kb=K]: writes the pid to run/NAME first (if
// given), then measures microtime() around usleep(N ms) (a signal would cut
// the sleep short) and prints "<pid> <microseconds slept>\n", then K lines
// (default 64) of 1024 bytes, "line <i> xxx…\n", then "end\n": a body whose
// every byte the test can check.
header('Content-Type: text/plain');
if (isset($_GET['mark'])) {
    file_put_contents(__DIR__ . '/run/' . basename($_GET['mark']), (string)getmypid());
}
$t0 = microtime(true);
usleep(1000 * (int)($_GET['ms'] ?? 0));
$slept = (int)round((microtime(true) - $t0) * 1000000);
printf("%d %d\n", getmypid(), $slept);
$kb = (int)($_GET['kb'] ?? 64);
for ($i = 0; $i < $kb; $i++) {
    echo str_pad("line $i ", 1023, 'x'), "\n";
}
echo "end\n";
