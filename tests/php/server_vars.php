<?php
// The $_SERVER entries that depend on how the web server passes the script:
// one `NAME=value` line each, `NAME absent` when PHP did not set it.
header('Content-Type: text/plain');
foreach (['SCRIPT_FILENAME', 'SCRIPT_NAME', 'PATH_INFO', 'PATH_TRANSLATED', 'PHP_SELF', 'REQUEST_URI',
          'QUERY_STRING', 'ORIG_SCRIPT_FILENAME', 'ORIG_SCRIPT_NAME', 'ORIG_PATH_INFO',
          'ORIG_PATH_TRANSLATED', 'REDIRECT_URL', 'DOCUMENT_ROOT'] as $k) {
    echo array_key_exists($k, $_SERVER) ? "$k=" . $_SERVER[$k] : "$k absent", "\n";
}
