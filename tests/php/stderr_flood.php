<?php
// stderr_flood.php?mb=N: writes N MiB to the process's own stderr
// (php://stderr, outside FastCGI) in 1 KiB lines "flood <i> xxx…\n", then
// prints "flooded N".
header('Content-Type: text/plain');
$mb = (int)($_GET['mb'] ?? 1);
$err = fopen('php://stderr', 'wb');
for ($i = 0; $i < $mb * 1024; $i++) {
    $head = "flood $i ";
    fwrite($err, $head . str_repeat('x', 1023 - strlen($head)) . "\n");
}
fclose($err);
echo "flooded $mb";
