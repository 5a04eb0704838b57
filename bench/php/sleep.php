<?php
// fpmd benchmark: a request that waits (I/O-like) and burns no CPU: with 50
// connections and N children the pool is saturated, so this measures queueing.
usleep(50000);
echo "slept 50 ms\n";
