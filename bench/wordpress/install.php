<?php
// bench/lib/wordpress.py runs this with php-cgi from the command line in
// the bench's WordPress directory (then removes it): installs WordPress in
// the bench's database with the theme FPMD_BENCH_THEME active. Prints "ok"
// at the end, only when it all went well. As tests/wordpress/fpmd-setup.php.
define('WP_INSTALLING', true);
require __DIR__ . '/wp-load.php';

// No mail (there is no MTA) and no HTTP (wp_install() probes the site's
// permalinks over HTTP).
function wp_new_blog_notification($title, $url, $user_id, $password) {}
add_filter('pre_http_request', function () {
    return new WP_Error('fpmd_bench', 'no HTTP in the bench');
});
require_once ABSPATH . 'wp-admin/includes/upgrade.php';
$r = wp_install('fpmd bench', 'admin', 'admin@example.invalid', false, '', 'admin-password');
if (!is_array($r) || empty($r['user_id'])) {
    echo "wp_install failed: ", var_export($r, true), "\n";
    exit(1);
}
$theme = getenv('FPMD_BENCH_THEME');
$t = wp_get_theme($theme);
if (!$t->exists() || $t->errors()) {
    echo "theme $theme not found under ", get_theme_root(), ": ", var_export($t->errors(), true), "\n";
    exit(1);
}
switch_theme($theme);
if (get_stylesheet() !== $theme || get_template() !== $theme) {
    echo "theme $theme not active: ", get_stylesheet(), " / ", get_template(), "\n";
    exit(1);
}
$post = get_post(1);
if (!$post || $post->post_status !== 'publish') {
    echo "post 1 (Hello world!) not published\n";
    exit(1);
}
echo "ok\n";
