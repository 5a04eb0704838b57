<?php
// Writes a marker to the process's own stderr (outside FastCGI) and to the FastCGI stderr stream.
header('Content-Type: text/plain');
$m = basename($_GET['marker'] ?? 'marker');
file_put_contents('php://stderr', "process-stderr:$m\n");
error_log("fastcgi-stderr:$m");
echo "ok ", getmypid();
