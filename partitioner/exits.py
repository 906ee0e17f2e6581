"""What both commands (``partition`` and ``partition import``) share: errors become
exit statuses with one line on stderr, never a traceback (set
``PARTITIONER_DEBUG=1`` to see one for an internal failure), and output paths are
checked before any long work."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import traceback
from pathlib import Path
from typing import Callable


class OneLineParser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage block), exit status 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


#: The status a shell reports for a tool that a closed pipe stopped (128 + SIGPIPE).
BROKEN_PIPE = 141


class OutputError(Exception):
    """Standard output cannot take the report (a full disk, an I/O error; not a
    closed pipe, which ends the command quietly)."""


_PIECE = 4096


@contextlib.contextmanager
def _stdout_errors():
    """A failing stdout as :class:`OutputError`; a closed pipe stays ``BrokenPipeError``."""
    try:
        yield
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise OutputError(exc.strerror or str(exc)) from None


def write_output(text: str) -> None:
    """Write ``text`` to standard output; a failing stdout raises :class:`OutputError`
    (a closed pipe still raises ``BrokenPipeError``), and so does a closed one
    (``>&-``: Python then has no ``sys.stdout``)."""
    if sys.stdout is None:
        raise OutputError("it is closed")
    with _stdout_errors():
        # in pieces no larger than the buffer: one larger write goes straight to the
        # descriptor, and a pipe closed in its middle would cut it short unreported
        for start in range(0, len(text), _PIECE):
            sys.stdout.write(text[start:start + _PIECE])
    _flush_output()  # a closed pipe or a full disk must show here, while the command still runs


def _flush_output() -> None:
    if sys.stdout is None:  # closed (>&-): nothing was written there
        return
    with _stdout_errors():
        sys.stdout.flush()


def _discard_output() -> None:
    """Point stdout's descriptor at the null device, so that what its buffer still
    holds never reaches the reader (nor fails again in the interpreter's last flush)."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # a stdout without a descriptor (captured in tests)
        pass


def guarded(prog: str, run: Callable[[], int], bad_input: tuple[type[BaseException], ...]) -> int:
    """``run()``'s status; 2 for an exception in ``bad_input``, 130 on Ctrl-C, 141
    (quietly) when the reader of stdout went away, 2 with one line when stdout
    fails otherwise (``partition G > /dev/full``), and 1 for any other exception
    (an internal failure). A closed stderr (``2>&-``) takes the notes and errors to
    the null device, never to stdout."""
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - the process's own stderr, open until it exits
    try:
        status = run()
        _flush_output()  # a closed pipe or a full disk must show here, not in the interpreter's last flush
        return status
    except BrokenPipeError:
        # `partition G | head`: stop quietly, as Unix tools do, with nothing left to flush
        _discard_output()
        return BROKEN_PIPE
    except OutputError as exc:
        _discard_output()
        note(f"{prog}: error: cannot write the output to stdout: {exc}")
        return 2
    except bad_input as exc:
        note(f"{prog}: error: {' '.join(str(exc).split())}")
        return 2
    except KeyboardInterrupt:
        note(f"{prog}: interrupted")
        return 130
    except Exception as exc:  # noqa: BLE001 - the commands' last line of defence: one line, exit 1
        if os.environ.get("PARTITIONER_DEBUG"):
            traceback.print_exc()
        note(f"{prog}: internal error: {type(exc).__name__}: {exc}")
        return 1


def note(text: str) -> None:
    """Say ``text`` (a line, or lines) on stderr, where a command's notes and errors
    go; a stderr that cannot take it (``2>/dev/full``) never stops the command, and
    the exit status alone says what happened."""
    try:
        print(text, file=sys.stderr, flush=True)
    except OSError:
        pass


def unwritable(path: str | Path, directory: bool = False) -> str | None:
    """Why ``path`` cannot be written, as a phrase, or ``None`` when it can.

    A file needs an existing, writable parent directory; a ``directory`` may be
    missing (it is created with its parents), but its nearest existing ancestor must
    be a writable directory. Neither may be the other kind of thing already."""
    if not directory and (str(path).endswith(("/", os.sep)) or os.path.basename(str(path)) in (".", "..")):
        # (Path() drops a trailing '/' or '/.', and the file would be written without it)
        return f"'{path}' ends in '/': it names a directory, not a file"
    target = Path(path)
    if target.exists():
        if directory != target.is_dir():
            return f"'{target}' is {'a file' if directory else 'a directory'}"
        return None if os.access(target, os.W_OK) else f"'{target}' is not writable"
    parent = target.parent
    if directory:
        while not parent.exists():
            parent = parent.parent
    if not parent.is_dir():
        return f"'{parent}' is not a directory" if parent.exists() else f"no directory '{parent}'"
    return None if os.access(parent, os.W_OK | os.X_OK) else f"cannot create files in '{parent}'"
