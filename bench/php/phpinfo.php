<?php
// fpmd benchmark: a mid-sized CPU-bound page (~100 KB of HTML).
phpinfo();
