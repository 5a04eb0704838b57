<?php
header('HTTP/1.1 404 Not Found');
header('X-Fpmd-Test: yes');
echo "nothing here\n";
