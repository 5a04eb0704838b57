<?php
// sapi_forge.php?t=TOKEN: tries to forge fpmd's SAPI lines: prints them
// on STDOUT with its own token and with TOKEN, logs them on STDERR with
// TOKEN (a token the client chose), then works 300 ms and prints "tail".
// Its own token ends nothing early either: it only ends its own request.
// Its token: the first 32 bytes of FPMD_SAPI (the last says what to report).
$mine = substr((string) getenv('FPMD_SAPI'), 0, 32);
$t = $_GET['t'] ?? 'ffffffffffffffffffffffffffffffff';
echo "\x1b[fpmd $mine finish]\n";
echo "\x1b[fpmd $t finish]\n";
error_log("\x1b[fpmd $t finish]", 4);
error_log("\x1b[fpmd $t end 1 2 3]", 4);
flush();
usleep(300000);
echo "tail\n";
echo "mine=", strlen($mine), "\n";
