<?php
// Runs the program ?bin= (a set-id helper the test made) and prints what it
// printed: `id` shows the effective ids the helper got.
echo shell_exec(escapeshellarg($_GET['bin'] ?? '/bin/false'));
