"""``tidegauge ARGS`` as the console script starts it, with the orderly quit a SIGTERM or SIGHUP
asks for given ``GRACE`` seconds instead of ``SIGNAL_QUIT_GRACE_S`` before it ends the hard way.

    cp tests/short_grace_dashboard.py DIR/tidegauge; python DIR/tidegauge GRACE ARGS...

Run from a file named ``tidegauge``, as the console script is: tidegauge then takes the process
for its own (``app.system.process_exit.is_the_tidegauge_process``) and handles the signals as it
does for a user. For the test of a dashboard whose terminal is no longer read: there the orderly
quit can never finish, and what is tested is what happens after the grace, not its length, which
users keep at the default (nothing they can set changes it)."""

from __future__ import annotations

import sys

from app.wiring import entry

if __name__ == "__main__":
    entry.prepare()
    # After prepare, as app.wiring.entry imports the command line; read when a signal arrives.
    from app.surfaces.dashboard import launch

    launch.SIGNAL_QUIT_GRACE_S = float(sys.argv[1])
    from app.wiring.cli import main

    sys.exit(main(sys.argv[2:]))
