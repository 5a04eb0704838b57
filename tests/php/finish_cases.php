<?php
// finish_cases.php?case=NAME&mark=FILE: one way of calling
// fastcgi_finish_request(); every step reached is noted, and a shutdown
// function writes them, with connection_status(), to run/FILE.
$steps = [];
register_shutdown_function(function () use (&$steps) {
    $steps[] = 'shutdown status=' . connection_status();
    file_put_contents(__DIR__ . '/run/' . basename($_GET['mark'] ?? 'cases'), implode("\n", $steps));
});
$finish = function () use (&$steps) {
    $r = fastcgi_finish_request();
    $steps[] = 'finish=' . var_export($r, true);
};
switch ($_GET['case'] ?? '') {
    case 'nested':
        echo "outer ";
        ob_start();
        echo "level1 ";
        ob_start(function ($b) { return strtoupper($b); });
        echo "level2\n";
        $finish();
        echo "after\n";
        break;
    case 'big':
        echo str_repeat("0123456789abcdef", 128 << 10), "\n";
        $finish();
        echo "after\n";
        break;
    case 'twice':
        echo "once\n";
        $finish();
        $finish();
        break;
    case 'fatal':
        echo "before\n";
        $finish();
        undefined_function_after_finish();
        $steps[] = 'not reached';
        break;
    case 'exit':
        echo "before\n";
        $finish();
        exit(3);
    case 'abort':
        ignore_user_abort(false);
        echo "before\n";
        $finish();
        echo str_repeat('x', 100000);
        flush();
        $steps[] = 'after output';
        break;
    case 'ignore':
        ignore_user_abort(true);
        echo "before\n";
        $finish();
        echo str_repeat('x', 100000);
        flush();
        $steps[] = 'after output';
        break;
    case 'sleep_then_finish':
        // The client is gone before the call (it gave up after 200 ms).
        ignore_user_abort(true);
        usleep(600000);
        echo "late\n";
        $finish();
        $steps[] = 'after finish';
        break;
    case 'work':
        // request_terminate_timeout expires after the call.
        echo "before\n";
        $finish();
        for ($i = 0; $i < 30; $i++) {
            usleep(100000);
            $steps[] = "tick $i";
        }
        break;
}
$steps[] = 'end';
