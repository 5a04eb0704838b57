<?php
// big.php?mb=N: N MiB of 1 KiB lines, line i is 1023 times chr(97 + i % 26) then "\n".
header('Content-Type: application/octet-stream');
$mb = (int)($_GET['mb'] ?? 1);
for ($i = 0; $i < $mb * 1024; $i++) {
    echo str_repeat(chr(97 + $i % 26), 1023), "\n";
}
