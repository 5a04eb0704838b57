<?php
// env.php?names=A,B: one line per name, "NAME=" then var_export(getenv(NAME)).
header('Content-Type: text/plain');
foreach (explode(',', $_GET['names'] ?? 'FOO,SECRET') as $name) {
    echo $name, "=", var_export(getenv($name), true), "\n";
}
