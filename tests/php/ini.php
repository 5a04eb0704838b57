<?php
// ini.php?name=X: prints var_export(ini_get(X)).
header('Content-Type: text/plain');
echo var_export(ini_get($_GET['name'] ?? ''), true);
