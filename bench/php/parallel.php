<?php
// fpmd benchmark: not a workload. The bench sends N of these at once (N =
// pool size) before and after measuring a backend: they take ~300 ms when
// every child serves one, ~600 ms when a child is missing or stuck.
usleep(300000);
echo "parallel\n";
