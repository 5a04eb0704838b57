<?php
setcookie('a', '1');
setcookie('b', '2', ['path' => '/x', 'httponly' => true]);
setcookie('c', '3');
echo "cookies\n";
