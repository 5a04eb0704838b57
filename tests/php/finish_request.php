<?php
// php-fpm's SAPI function, called unguarded: under php-cgi a fatal error.
echo "early\n";
fastcgi_finish_request();
echo "late\n";
