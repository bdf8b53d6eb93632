"""The command line: every wing's command rows (``<study>/commands.py``, ``data/commands.py``,
``paper/commands.py``) joined into one parser, ``python -m pillm <command>``."""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

from pillm.core.commands import Arg, Command
from pillm.core.log import say
from pillm.plan import STUDIES

# Where the command rows live: the data layer, each study of the registry, the paper layer
# (pillm.codedeps counts these modules in every command's code).
COMMAND_MODULES = (
    "pillm.data.commands",
    *(f"pillm.{name}.commands" for name in STUDIES),
    "pillm.paper.commands",
)

PLAN = Command(
    "plan",
    "pillm.estimate:plan",
    "the jobs a run would do, by rule, its estimated wall time here, and what is missing",
    (
        Arg("--configfile", {"nargs": "+", "help": "config files (default config/config.yaml)"}),
        Arg("--config", {"nargs": "+", "help": "overrides as for snakemake --config"}),
    ),
    ("configfile", "config"),
    rule=False,
)

MPS_BULK_HELP = (
    "a bulk job (kernels that fill the GPU): under CUDA MPS it runs at the below-normal client "
    "priority, so the small kernels of latency-bound jobs are not queued behind its blocks"
)
# command name -> the module whose COMMANDS row defines it
DEFINED_IN: dict[str, str] = {
    c.name: m for m in COMMAND_MODULES for c in importlib.import_module(m).COMMANDS
}
DEFINED_IN[PLAN.name] = __name__
COMMANDS: tuple[Command, ...] = (
    *(c for m in COMMAND_MODULES for c in importlib.import_module(m).COMMANDS),
    PLAN,
)
BY_NAME: dict[str, Command] = {c.name: c for c in COMMANDS}
if len(BY_NAME) != len(COMMANDS):
    raise RuntimeError(f"two command rows share a name among {COMMAND_MODULES}")


def command(name: str) -> Command:
    """The table entry of ``name``; a KeyError lists the known commands."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"no pillm command {name!r}; known: {sorted(BY_NAME)}") from None


def _resolve(spec: str) -> Any:
    module, attr = spec.split(":")
    return getattr(importlib.import_module(module), attr)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pillm", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    for c in COMMANDS:
        sp = sub.add_parser(c.name, help=c.help)
        for a in c.args:
            sp.add_argument(a.flag, **a.options)
        if c.device:
            sp.add_argument("--device", default="auto")
            sp.add_argument("--mps-bulk", action="store_true", help=MPS_BULK_HELP)
        if c.threads:
            sp.add_argument(
                "--threads", type=int, default=0, help="CPU threads for torch (0: default)"
            )
    return p


def stop_on_signals() -> None:
    """SIGTERM (a scheduler or Snakemake stopping the job) raises SystemExit(143), as SIGINT
    raises KeyboardInterrupt: the job unwinds, so every open ``atomic_path`` removes its
    temporary file and nothing half-written is left that looks finished."""

    def stop(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cmd = BY_NAME[args.command]
    if cmd.device:
        from pillm.accel.gpu_slots import assign_gpu
        from pillm.accel.mps import client_devices

        client_devices()  # before CUDA starts: the MPS server's numbering of the GPUs
        assign_gpu(args.device)  # before anything initialises CUDA: one GPU per job
        if args.mps_bulk:  # read by CUDA when this process creates its context
            os.environ["CUDA_MPS_CLIENT_PRIORITY"] = "1"
        # cuBLAS reads this at its first call; deterministic training (core.runtime) needs it
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    if cmd.threads and args.threads > 0:
        import torch  # only job commands take --threads: report commands stay torch-free

        torch.set_num_threads(args.threads)
    fn = _resolve(cmd.target)
    values = [getattr(args, v) if isinstance(v, str) else v(args) for v in cmd.passes]
    # A bad config key is the user's to fix, whatever the command: one line naming it, exit 2.
    errors = (_resolve("pillm.core.config:ConfigError"), *(_resolve(e) for e in cmd.user_errors))
    if cmd.rule:  # a job: its log says what ran and how long it took
        say(f"pillm {cmd.name}: started ({cmd.target})")
    try:
        fn(*values)
    except errors as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if cmd.rule:
        say(f"pillm {cmd.name}: done")
    return 0
