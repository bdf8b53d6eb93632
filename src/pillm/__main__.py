"""``python -m pillm <command> ...``: the commands are the table in :mod:`pillm.cli`."""

import sys

from pillm.cli import main

if __name__ == "__main__":
    sys.exit(main())
