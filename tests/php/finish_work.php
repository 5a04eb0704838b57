<?php
// finish_work.php?ms=N&mark=NAME[&nobody=1]: prints a line (not with
// nobody=1: the head is then not sent before the call), calls
// fastcgi_finish_request() guarded by function_exists() as WordPress's
// wp-cron.php does, works N ms, prints again (php-fpm discards it), and
// writes run/NAME ("done PID RESULT") once the work is done.
header('X-Before: 1');
if (!isset($_GET['nobody'])) {
    echo "before\n";
}
$r = function_exists('fastcgi_finish_request') ? fastcgi_finish_request() : 'missing';
usleep(1000 * (int)($_GET['ms'] ?? 0));
echo "after\n";
file_put_contents(
    __DIR__ . '/run/' . basename($_GET['mark'] ?? 'finish'),
    'done ' . getmypid() . ' ' . var_export($r, true)
);
