"""``python -m pillm <command> ...``: the commands are the table in :mod:`pillm.cli`."""

import sys

from pillm.cli import main, stop_on_signals

if __name__ == "__main__":
    stop_on_signals()
    sys.exit(main())
