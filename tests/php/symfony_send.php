<?php
// symfony_send.php?ms=N&mark=NAME: Debian's Symfony HttpFoundation
// (php-symfony-http-foundation) answers with Response::send(), which
// calls fastcgi_finish_request() when the function exists; then the
// script works N ms, prints again (nowhere to go) and writes run/NAME
// ("done PID") (tests/it/sapi_apps.rs).
require_once '/usr/share/php/Symfony/Component/HttpFoundation/autoload.php';

use Symfony\Component\HttpFoundation\Request;
use Symfony\Component\HttpFoundation\Response;

$request = Request::createFromGlobals();
$response = new Response(
    "sent by Response::send()\n",
    201,
    ['Content-Type' => 'text/plain', 'X-App' => 'symfony']
);
$response->prepare($request);
$response->send();
usleep(1000 * (int) $request->query->get('ms', 0));
echo "after\n";
file_put_contents(
    __DIR__ . '/run/' . basename($request->query->get('mark', 'symfony')),
    'done ' . getmypid()
);
