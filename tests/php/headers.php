<?php
// Status and headers set from PHP: 418, `X-A: b`, two Set-Cookie headers.
http_response_code(418);
header('X-A: b');
header('Set-Cookie: a=1; path=/', false);
header('Set-Cookie: b=2; path=/; HttpOnly', false);
header('Content-Type: text/plain');
echo "teapot\n";
