<?php
// Writes lines to the process's own stdout and stderr (outside FastCGI),
// for catch_workers_output: "stdout-line:M" and "stderr-line:M", a line
// with an ESC, quotes and a backslash ("esc:M ..."), and a JSON line
// ('{"json":"M"}'). ?marker=M
header('Content-Type: text/plain');
$m = basename($_GET['marker'] ?? 'marker');
file_put_contents('php://stdout', "stdout-line:$m\n");
file_put_contents('php://stderr', "stderr-line:$m\n");
file_put_contents('php://stderr', "esc:$m \x1b[31mred\x1b[0m \"quoted\" back\\slash\n");
file_put_contents('php://stderr', json_encode(['json' => $m]) . "\n");
echo "ok ", getmypid();
