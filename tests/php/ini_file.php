<?php
// var_export(php_ini_loaded_file()): the php.ini this php-cgi read, or false (-n).
header('Content-Type: text/plain');
echo var_export(php_ini_loaded_file(), true);
