<?php
// ticks.php?ms=N&mark=NAME[&trap=1]: a script with a side effect every
// 100 ms. Writes its pid to run/NAME, then for N ms appends the time
// (microtime, seconds) to run/NAME.ticks every 100 ms, then prints "done".
// trap=1: also catches SIGTERM (needs security.pcntl = true), noting it in
// run/NAME.term, and runs on.
header('Content-Type: text/plain');
$mark = __DIR__ . '/run/' . basename($_GET['mark'] ?? 'ticks');
if (!empty($_GET['trap'])) {
    pcntl_async_signals(true);
    pcntl_signal(SIGTERM, function () use ($mark) {
        file_put_contents("$mark.term", "SIGTERM\n", FILE_APPEND);
    });
}
file_put_contents($mark, (string)getmypid());
$end = microtime(true) + ((int)($_GET['ms'] ?? 0)) / 1000;
while (microtime(true) < $end) {
    file_put_contents("$mark.ticks", sprintf("%.6f\n", microtime(true)), FILE_APPEND);
    usleep(100000);
}
echo "done";
