"""What the benches (bench.py, pm_scenarios.py, reload.py, scale.py) share.

  procs     the processes they start (own session, PDEATHSIG, stopped with
            every descendant), /proc, the logs
  servers   fpmd and php-fpm (configs, config test, command line), a backend
            behind nginx, nginx, wrk; the checks before a run
  tree      a run: its temp dir, the copy of fpmd, the clean-up on errors,
            bugs and Ctrl-C that stops everything and reports leftovers
  report    the machine, the head of every result file, JSON, lists, figures
  wordpress bench.py's MariaDB (in the temp dir) and WordPress site on it

Stdlib only.
"""

import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # of bench/lib/
