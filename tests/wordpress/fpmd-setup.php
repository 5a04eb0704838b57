<?php
// tests/it/sapi_apps.rs runs this with php-cgi from the command line in
// the test's WordPress directory:
//   FPMD_SETUP=install                  installs WordPress in the test's database
//   FPMD_SETUP=schedule FPMD_MARK=NAME  schedules fpmd_test_work(NAME), due now
//                                       (its callback: mu-plugins/fpmd-test.php)
// Prints "ok" at the end, only when it all went well.
$fpmd_action = getenv('FPMD_SETUP');
if ($fpmd_action === 'install') {
    define('WP_INSTALLING', true);
}
require __DIR__ . '/wp-load.php';

if ($fpmd_action === 'install') {
    // No mail (there is no MTA) and no HTTP (wp_install() probes the
    // site's permalinks over HTTP) from the test.
    function wp_new_blog_notification($title, $url, $user_id, $password) {}
    add_filter('pre_http_request', function () {
        return new WP_Error('fpmd_test', 'no HTTP in the test');
    });
    require_once ABSPATH . 'wp-admin/includes/upgrade.php';
    $r = wp_install('fpmd test', 'admin', 'admin@example.invalid', false, '', 'admin-password');
    if (!is_array($r) || empty($r['user_id'])) {
        echo "wp_install failed: ", var_export($r, true), "\n";
        exit(1);
    }
} elseif ($fpmd_action === 'schedule') {
    $mark = (string) getenv('FPMD_MARK');
    $r = wp_schedule_single_event(time() - 1, 'fpmd_test_work', [$mark], true);
    if ($r !== true) {
        echo "wp_schedule_single_event failed: ", var_export($r, true), "\n";
        exit(1);
    }
} else {
    echo "FPMD_SETUP must be install or schedule\n";
    exit(2);
}
echo "ok\n";
