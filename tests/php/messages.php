<?php
// Three log messages of one request, as php-fpm frames them on FastCGI
// STDERR: a warning, a userland error_log() line, an uncaught exception
// (a message of several lines).
trigger_error("first fpmd_msg", E_USER_WARNING);
error_log("second fpmd_msg");
echo "ok\n";
throw new Exception("third fpmd_msg");
