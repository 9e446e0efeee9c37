"""What every subcommand shares: its parser class, the shared flags, output and error handling.

:func:`dispatch` runs a parsed subcommand the way ``cactus-theory`` does (output paths checked
first; a ValueError is one line on stderr and exit status 2; a missing optional package names
the extra that installs it); :func:`module_entry` gives one subcommand the same behaviour as a
``python -m`` entry of its own module.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

from ._extras import EXTRA_OF, MissingExtraError, missing_extra_message
from ._io import atomic_write_text
from ._tables import format_table, json_ready

__all__ = [
    "write_atomic",
    "parse_knobs",
    "check_output_path",
    "add_output",
    "add_seed",
    "add_knobs",
    "add_per_file",
    "dispatch",
    "module_entry",
    "OPTIONAL_EXTRAS",
]

#: Optional packages and the extra of ``pyproject.toml`` that installs each (one table for the
#: package: :data:`cactus_theory._extras.EXTRA_OF`).
OPTIONAL_EXTRAS = EXTRA_OF


def write_atomic(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename (never half-written)."""
    atomic_write_text(path, text)


class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown in --help; descriptions and epilogs printed as written."""


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr and exit status 2."""

    def error(self, message):  # noqa: D401 - argparse hook
        self.exit(2, f"{self.prog}: error: {message}\n")


# --------------------------------------------------------------------------- shared parsers


def parse_knobs(items) -> dict:
    """Parse repeated ``--knob NAME=VALUE`` strings into a dict (one parser for every subcommand).

    VALUE is read as JSON when it parses (``0.75`` -> float, ``3`` -> int, ``true``, ``null``),
    else kept as a string (``divergence=kl``). Raises ValueError naming ``knob`` for an item with
    no ``=``, an empty name or an empty value.
    """
    knobs = {}
    for item in items or ():
        name, eq, value = str(item).partition("=")
        name = name.strip()
        if not eq or not name or value.strip() == "":
            raise ValueError(f"knob: expected NAME=VALUE, got {item!r}")
        try:
            knobs[name] = json.loads(value)
        except json.JSONDecodeError:
            knobs[name] = value
    return knobs


def check_output_path(path, name: str = "output", folder: bool = False) -> None:
    """Fail early (ValueError naming ``name``) when ``path`` cannot be written.

    The folder that will hold ``path`` (``path`` itself when ``folder`` and it exists, else its
    parent) must exist and accept a new file; checked by creating and removing a temporary file,
    so a long run never finishes only to lose its result.
    """
    if path is None:
        return
    path = os.fspath(path)
    if folder and os.path.isdir(path):
        parent = path
    elif folder and not os.path.exists(path):
        parent = os.path.dirname(os.path.abspath(path))  # the tool creates the folder itself
    else:
        if os.path.isdir(path):
            raise ValueError(f"{name}: {path!r} is a folder, expected a file path")
        parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise ValueError(f"{name}: folder {parent!r} does not exist")
    try:
        with tempfile.NamedTemporaryFile(dir=parent, prefix=".write-check-"):
            pass
    except OSError as exc:
        raise ValueError(f"{name}: folder {parent!r} is not writable ({exc.strerror or exc})") from None


def _int_at_least(minimum: int, what: str = "an integer"):
    """An argparse type: an integer >= ``minimum`` (argparse then names the option in its message)."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}") from None
        if v < minimum:
            raise argparse.ArgumentTypeError(f"{what} must be >= {minimum}, got {v}")
        return v

    return parse


_positive_int = _int_at_least(1)
_seed = _int_at_least(0, "a seed")


def add_output(
    p,
    *,
    json_flag=True,
    csv_flag=False,
    output_help="write to this file (atomically) instead of standard output",
):
    """Add the shared ``-o/--output``, ``--json`` and (for tables) ``--csv`` flags."""
    p.add_argument("-o", "--output", default=None, metavar="PATH", help=output_help)
    if json_flag or csv_flag:
        g = p.add_mutually_exclusive_group()
        if json_flag:
            g.add_argument("--json", action="store_true", help="print the results as JSON data")
        if csv_flag:
            g.add_argument("--csv", action="store_true", help="print the tables as CSV")


def add_seed(p, help="seed of every random draw"):
    """Add the shared ``--seed`` (an integer >= 0)."""
    p.add_argument("--seed", type=_seed, default=0, help=help)


def add_per_file(p):
    """Add ``--per-file``: each file of an ``--input`` folder analysed apart (a ``file`` column)."""
    p.add_argument(
        "--per-file",
        action="store_true",
        help="with --input FOLDER: analyse each file apart, one block of rows per file named in a "
        "'file' column (a folder of different recordings, such as dump's one file per drafter, "
        "is refused without it; shards of one recording are analysed together)",
    )


def add_knobs(p):
    """Add the shared repeatable ``--knob NAME=VALUE``."""
    p.add_argument(
        "--knob",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="rule knob, repeatable (e.g. --knob delta=0.75); VALUE read as JSON when it parses",
    )


def _emit(args, *, text: str = "", data=None, tables=()) -> None:
    """Print (or write to ``--output``) the text, the JSON data or the CSV tables."""
    if getattr(args, "json", False):
        out = json.dumps(json_ready(data), indent=2, allow_nan=False)
    elif getattr(args, "csv", False):
        tables = list(tables)
        if len(tables) == 1:
            out = format_table(tables[0], "csv")
        else:
            out = "\n\n".join(f"# {t.name}\n{format_table(t, 'csv')}" for t in tables)
    else:
        out = text
    _write(args, out)


def _write(args, out: str) -> None:
    out = out.rstrip("\n") + "\n"
    if getattr(args, "output", None):
        write_atomic(args.output, out)
    else:
        sys.stdout.write(out)


def _missing_extra(exc: ImportError):
    root = (getattr(exc, "name", None) or "").split(".")[0]
    if root in OPTIONAL_EXTRAS:
        return root, OPTIONAL_EXTRAS[root]
    return None


def _check_paths(args) -> None:
    check_output_path(getattr(args, "output", None), "output")
    for attr, name in (("records_dir", "records-dir"), ("out_dir", "out-dir")):
        check_output_path(getattr(args, attr, None), name, folder=True)
    if getattr(args, "command", None) == "figures":
        check_output_path(args.out, "out", folder=True)


def dispatch(args, prog: str, handler) -> int:
    """Run ``handler(args)``: output paths checked first; errors exit 2 with one line on stderr.

    A ValueError prints ``<prog>: error: <message>``; an ImportError of an optional package
    (:data:`OPTIONAL_EXTRAS`) names the extra that installs it; any other ImportError is a bug
    and is raised.
    """
    try:
        _check_paths(args)
        return int(handler(args) or 0)
    except ValueError as exc:
        msg = " ".join(str(exc).split())
        print(f"{prog}: error: {msg}", file=sys.stderr)
        return 2
    except ImportError as exc:
        if isinstance(exc, MissingExtraError):
            print(f"{prog}: error: {exc}", file=sys.stderr)
            return 2
        extra = _missing_extra(exc)
        if extra is None:
            raise
        print(
            f"{prog}: error: {missing_extra_message(prog, extra[0], extra[1])} (or ./dev setup)",
            file=sys.stderr,
        )
        return 2


def module_entry(command: str, add_arguments, handler, argv=None, description: str = "") -> int:
    """``python -m`` entry of one subcommand: the arguments, checks and exit statuses of
    ``cactus-theory <command>`` (``argv`` defaults to ``sys.argv[1:]``)."""
    parser = _Parser(
        prog=f"cactus-theory {command}", description=description or None, formatter_class=_Formatter
    )
    add_arguments(parser)
    try:
        args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:
        return int(exc.code or 0) if not isinstance(exc.code, str) else 2
    args.command = command
    return dispatch(args, f"cactus-theory {command}", handler)
