<?php
// sleep.php?ms=N[&mark=NAME]: if mark is given, writes the pid to run/NAME first,
// then sleeps N ms and prints "<pid> <elapsed ms> done".
header('Content-Type: text/plain');
$t0 = microtime(true);
if (isset($_GET['mark'])) {
    file_put_contents(__DIR__ . '/run/' . basename($_GET['mark']), (string)getmypid());
}
usleep(1000 * (int)($_GET['ms'] ?? 0));
printf("%d %d done", getmypid(), (int)round((microtime(true) - $t0) * 1000));
