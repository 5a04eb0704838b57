<?php
// The demo page: which pool and which php-cgi child answered.
header('Content-Type: text/html; charset=utf-8');
$pool = getenv('FPMD_POOL') ?: '(unknown)';
$user = function_exists('posix_geteuid') ? posix_getpwuid(posix_geteuid())['name'] : get_current_user();
?>
<!doctype html>
<title>fpmd demo</title>
<h1>Served by fpmd</h1>
<table>
<tr><th align=left>pool</th><td><?= htmlspecialchars($pool) ?></td></tr>
<tr><th align=left>child pid</th><td><?= getmypid() ?></td></tr>
<tr><th align=left>running as</th><td><?= htmlspecialchars($user) ?></td></tr>
<tr><th align=left>PHP version</th><td><?= PHP_VERSION ?> (<?= PHP_SAPI ?>)</td></tr>
<tr><th align=left>memory_limit</th><td><?= ini_get('memory_limit') ?></td></tr>
</table>
<p>Reload the page: the most recently used idle child answers, so light traffic stays on one child.</p>
