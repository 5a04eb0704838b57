<?php
// The image's sample site: replace /var/www/html with your own (COPY it in
// an image built FROM this one, or mount it).
header('Content-Type: text/plain');
echo "Hello from fpmd, pool ", getenv('FPMD_POOL') ?: 'www', ", PHP ", PHP_VERSION, "\n";
