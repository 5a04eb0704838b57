<?php
echo "before\n";
fpmd_this_function_does_not_exist();
echo "after\n";
