<?php
// Streams php://input and prints "<length> <md5>" so tests can check big bodies.
header('Content-Type: text/plain');
$ctx = hash_init('md5');
$len = 0;
$in = fopen('php://input', 'rb');
while (!feof($in)) {
    $chunk = fread($in, 1 << 16);
    if ($chunk === false) { break; }
    $len += strlen($chunk);
    hash_update($ctx, $chunk);
}
echo $len, " ", hash_final($ctx);
