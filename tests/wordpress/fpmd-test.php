<?php
/*
 * Plugin Name: fpmd test
 * Description: A must-use plugin of tests/it/sapi_apps.rs: the cron
 * event fpmd_test_work(MARK) works 1.5 s, then writes FPMD_TEST_RUN/MARK
 * ("done PID"); when the script that ran it shuts down, MARK.end.
 */

add_action('fpmd_test_work', function ($mark) {
    usleep(1500000);
    $GLOBALS['fpmd_test_mark'] = basename($mark);
    file_put_contents(FPMD_TEST_RUN . '/' . basename($mark), 'done ' . getmypid());
});

add_action('shutdown', function () {
    if (isset($GLOBALS['fpmd_test_mark'])) {
        file_put_contents(FPMD_TEST_RUN . '/' . $GLOBALS['fpmd_test_mark'] . '.end', 'end');
    }
}, PHP_INT_MAX);
