<?php
// queue.php?id=ID[&ms=N]: appends ID to run/queue.log before anything else
// (the proof that the request ran PHP), then sleeps N ms (default 500) and
// prints "ID done".
header('Content-Type: text/plain');
$id = preg_replace('/[^A-Za-z0-9_-]/', '', $_GET['id'] ?? '');
file_put_contents(__DIR__ . '/run/queue.log', "$id\n", FILE_APPEND | LOCK_EX);
usleep(1000 * (int)($_GET['ms'] ?? 500));
echo "$id done";
