<?php
// Writes ?mib=N MiB (default 100) to the process's own stderr (or
// ?to=stdout) outside FastCGI, in lines of 100 bytes, then answers
// "ok PID BYTES" with the bytes written.
header('Content-Type: text/plain');
$mib = (int)($_GET['mib'] ?? 100);
$to = ($_GET['to'] ?? 'stderr') === 'stdout' ? 'php://stdout' : 'php://stderr';
$line = str_repeat('x', 99) . "\n";
$chunk = str_repeat($line, 10486); // ~1 MiB
$f = fopen($to, 'w');
$written = 0;
for ($i = 0; $i < $mib; $i++) {
    $n = fwrite($f, $chunk);
    if ($n === false) {
        break;
    }
    $written += $n;
}
fclose($f);
echo "ok ", getmypid(), " ", $written;
