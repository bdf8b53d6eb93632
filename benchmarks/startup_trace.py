"""A ``sitecustomize`` for start-up studies: copied as ``sitecustomize.py`` onto a GPU call's
PYTHONPATH, with ``PILLM_CPROFILE_DIR`` set, every ``python -m pillm ...`` process (not
Snakemake's) runs under cProfile (wall clock) and writes ``<dir>/<pid>.prof`` and
``<pid>.json`` (its arguments, and the wall times at interpreter start-up and at exit).
``startup_report.py`` reads them. Forked workers leave through ``os._exit`` and write nothing.
"""

import os

_dir = os.environ.get("PILLM_CPROFILE_DIR")
if _dir:
    import sys

    _cmd = list(sys.orig_argv)  # the command line as given (sys.argv is not set up yet)
    if "pillm" in _cmd and not any("snakemake" in c for c in _cmd):
        import atexit
        import cProfile
        import json
        import time

        _start = time.time()
        _prof = cProfile.Profile()
        _prof.enable()

        def _dump() -> None:
            _prof.disable()
            pid = os.getpid()
            _prof.dump_stats(f"{_dir}/{pid}.prof")
            with open(f"{_dir}/{pid}.json", "w") as fh:
                json.dump({"argv": _cmd, "start": _start, "end": time.time()}, fh)

        atexit.register(_dump)
