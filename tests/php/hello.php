<?php
// GET with query string: echoes a greeting and the raw query string.
header('Content-Type: text/plain');
echo "hello ", $_GET['name'] ?? 'world', "\n";
echo "QUERY_STRING=", $_SERVER['QUERY_STRING'] ?? '', "\n";
