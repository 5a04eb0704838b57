<?php
header('Location: /hello.php?name=redirected', true, 302);
