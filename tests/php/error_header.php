<?php
// error_header.php?case=NAME: ways a script ends, for php-fpm's
// fastcgi.error_header (the pool sets it): a fatal error, an uncaught
// exception after another status, a fatal error once the head was sent, a
// handled E_USER_ERROR, a fatal error in the script's shutdown function,
// a warning, nothing wrong.
switch ($_GET['case'] ?? '') {
    case 'fatal':
        echo "before\n";
        fpmd_this_function_does_not_exist();
        break;
    case 'exception':
        http_response_code(404);
        header('X-Mine: 1');
        throw new RuntimeException('uncaught');
    case 'sent':
        echo "before\n";
        while (ob_get_level() > 0) {
            ob_end_flush();
        }
        flush();
        fpmd_this_function_does_not_exist();
        break;
    case 'handled':
        set_error_handler(fn () => true);
        trigger_error('handled', E_USER_ERROR);
        echo "handled\n";
        break;
    case 'shutdown':
        register_shutdown_function(function () {
            fpmd_this_function_does_not_exist();
        });
        echo "ok\n";
        break;
    case 'warning':
        echo $fpmd_undefined_variable;
        echo "ok\n";
        break;
    default:
        echo "ok\n";
}
