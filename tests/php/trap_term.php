<?php
// trap_term.php?ms=N&mark=NAME: a script that survives SIGTERM. Installs a
// pcntl SIGTERM handler (which appends "SIGTERM" to run/NAME.term), writes
// its pid to run/NAME, then keeps running for N ms (in 10 ms sleeps, which a
// signal interrupts) and prints "<pid> survived".
// Needs pcntl_* allowed (security.pcntl = true: fpmd disables them by default).
header('Content-Type: text/plain');
$mark = __DIR__ . '/run/' . basename($_GET['mark'] ?? 'trap');
pcntl_async_signals(true);
pcntl_signal(SIGTERM, function () use ($mark) {
    file_put_contents("$mark.term", "SIGTERM\n", FILE_APPEND);
});
file_put_contents($mark, (string)getmypid());
$end = microtime(true) + ((int)($_GET['ms'] ?? 0)) / 1000;
while (microtime(true) < $end) {
    usleep(10000);
}
printf("%d survived", getmypid());
