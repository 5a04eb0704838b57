<?php
// fpmd benchmark: the cheapest request, so the process manager's own cost shows.
echo "Hello, world!\n";
