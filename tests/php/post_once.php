<?php
// post_once.php?id=ID: appends ID to run/posts.log first (one line per run:
// the proof of how many times the request ran), then prints
// "<length> <md5>" of php://input.
header('Content-Type: text/plain');
$id = preg_replace('/[^A-Za-z0-9_-]/', '', $_GET['id'] ?? '');
file_put_contents(__DIR__ . '/run/posts.log', "$id\n", FILE_APPEND | LOCK_EX);
$body = file_get_contents('php://input');
echo strlen($body), " ", md5($body);
