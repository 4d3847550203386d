"""The ``vrh`` command line: ``main(argv)`` with one subcommand per registered analysis (:mod:`vrh.analyses`)
and per module of :mod:`vrh.commands` (what is not an analysis: its own grammar).

Each command's options are the fields of its ``Config`` dataclass (declared once, in :mod:`vrh.options`
groups plus the command's own fields); the parser is generated from them. Heads are written
``LAYER:HEAD`` (0-based), e.g. ``--mask-heads 3:1,10:4``. ``--model`` takes a local checkpoint folder, a
hub id, or ``organism`` (the shipped model organism).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from vrh.commands import data, heads, models, organism, report, study
from vrh.options import add_options, parse_config

# the commands that are not analyses, each at its place in --help among the analyses' (Analysis.place)
COMMANDS = ((85, heads), (130, study), (140, report), (150, organism), (160, data), (170, models))


def commands() -> list:
    """Every command in the order of --help: the registered analyses (:func:`vrh.analyses.registry.analyses`)
    and :data:`COMMANDS`, each with ``NAME`` and ``HELP``, and either ``Config`` and ``run`` (an analysis) or
    ``add_arguments`` and ``main``."""
    from vrh.analyses.registry import analyses

    placed = [(a.place, _AnalysisCommand(a)) for a in analyses().values()] + list(COMMANDS)
    return [cmd for _, cmd in sorted(placed, key=lambda pc: pc[0])]


class _AnalysisCommand:
    """An analysis as a command: its name, help, settings type (the parser's options) and run."""

    def __init__(self, analysis):
        self.analysis, self.NAME, self.HELP, self.Config = analysis, analysis.name, analysis.help, analysis.settings

    def run(self, cfg, lm=None):
        return self.analysis.run_json(cfg, lm)


class Parser(argparse.ArgumentParser):
    """vrh's parsers (and, through ``add_subparsers``, every subcommand's): an abbreviated flag is refused, not
    read as the one it starts (``vrh sweep --k 3`` would silently run ``--ks 3``, a two-point sweep)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    from vrh import __version__

    parser = Parser(
        prog="vrh", description="Find, prove and characterize Visual Retrieval Heads in VLMs. "
        "Heads are LAYER:HEAD, 0-based.")
    parser.add_argument("--version", action="version", version=f"vrh {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for mod in commands():
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=mod.HELP)
        if hasattr(mod, "Config"):
            add_options(p, mod.Config)
        else:
            mod.add_arguments(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # idle OpenMP threads sleep instead of spinning: on a busy machine spinning threads made a 7 s detection
    # take 100 s (set before torch is imported, which happens inside the command)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--"]:  # `torchrun ... -m vrh -- detect ...`: the separator that keeps torchrun off vrh's options
        argv = argv[1:]
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        _refuse_unknown(parser, args, unknown)
    if not args.command:
        parser.print_help()
        return 2
    mod = next(m for m in commands() if m.NAME == args.command)
    try:
        if hasattr(mod, "Config"):
            mod.run(parse_config(mod.Config, args))
            return 0
        return mod.main(args)
    except BrokenPipeError:  # `vrh models | head`: the reader left; say nothing, as a Unix filter does
        _silence_stdout()
        return 141
    except (ValueError, OSError) as e:  # bad input, a missing or unreadable file, a folder in use
        print(f"vrh {args.command}: error: {_message(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        out = getattr(args, "out", None)
        if out and not os.path.isdir(out):  # stopped before the folder was made (a model still loading)
            print(f"\nvrh {args.command}: interrupted before anything was written ({out} was not created yet)",
                  file=sys.stderr)
            return 130
        where = f" in {out}" if out else ""
        resume = f"; rerun the same command with --resume to continue{where}" if _resumable(mod) else ""
        print(f"\nvrh {args.command}: interrupted; what finished is kept{where}{resume}", file=sys.stderr)
        return 130


def _refuse_unknown(parser: argparse.ArgumentParser, args: argparse.Namespace, unknown: list[str]) -> None:
    """Exit (2) with the usage of the (sub)command the unknown arguments were given to, naming each unknown flag
    and the command's closest flag, if any (``--k 3`` to ``vrh sweep``: did you mean ``--ks``?)."""
    import difflib

    target = parser
    while True:  # the deepest subcommand named: vrh data convert ..., vrh study run ...
        subs = [a for a in target._actions if isinstance(a, argparse._SubParsersAction)]
        name = getattr(args, subs[0].dest, None) if subs else None
        if not name:
            break
        target = subs[0].choices[name]
    flags = [o for a in target._actions for o in a.option_strings if o.startswith("--")]
    hints = []
    for arg in unknown:
        flag = arg.split("=", 1)[0]
        close = difflib.get_close_matches(flag, flags, n=1, cutoff=0.7) if flag.startswith("--") else []
        hints += [f"{close[0]} for {flag}"] if close else []
    target.error(f"unrecognized arguments: {' '.join(unknown)}" + (f" (did you mean {'; '.join(hints)}?)" if hints
                                                                    else ""))


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush does not fail on the closed pipe again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no file descriptor (stdout replaced in-process): nothing to flush at exit
        pass


def _message(err: BaseException) -> str:
    """An error's message (a system OSError as ``strerror: filename``, without the errno prefix)."""
    if isinstance(err, OSError) and err.strerror:
        filename = err.filename or _open_file_in(err)
        return f"{err.strerror}: {filename}" if filename else err.strerror
    return str(err).strip() or type(err).__name__


def _open_file_in(err: BaseException) -> str | None:
    """The file a failed ``write()`` / ``close()`` was on. Such an OSError (a full disk: ENOSPC, a quota, an
    I/O error) carries no filename, but a frame it passed through holds the open file: the innermost such
    frame, a file open for writing before one open for reading."""
    import io

    frames = []
    tb = err.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames):
        files = [v for v in frame.f_locals.values()
                 if isinstance(v, io.IOBase) and isinstance(getattr(v, "name", None), (str, os.PathLike))]
        files.sort(key=lambda f: not set(str(getattr(f, "mode", ""))) & set("wax+"))  # writers first
        if files:
            return os.fsdecode(files[0].name)
    return None


def _resumable(mod) -> bool:
    return "resume" in getattr(getattr(mod, "Config", None), "__dataclass_fields__", {})
