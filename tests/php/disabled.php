<?php
// Which of the functions (and classes) named in ?f= (?c=) this child has:
// one "name=yes|no" line each, then ini_get('disable_functions').
foreach (explode(',', $_GET['f'] ?? '') as $f) {
    if ($f !== '') {
        echo $f, '=', function_exists($f) ? 'yes' : 'no', "\n";
    }
}
// A disabled class still exists (PHP 8); making one warns that it "has
// been disabled for security reasons".
foreach (explode(',', $_GET['c'] ?? '') as $c) {
    if ($c !== '') {
        error_clear_last();
        @(new ReflectionClass($c))->newInstanceWithoutConstructor();
        $e = error_get_last();
        echo $c, '=', ($e && str_contains($e['message'], 'disabled')) ? 'no' : 'yes', "\n";
    }
}
echo 'ini=', ini_get('disable_functions'), "\n";
