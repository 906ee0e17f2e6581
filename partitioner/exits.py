"""What both commands (``partition`` and ``partition import``) share: errors become
exit statuses with one line on stderr, never a traceback (set
``PARTITIONER_DEBUG=1`` to see one for an internal failure)."""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from typing import Callable


class OneLineParser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage block), exit status 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def guarded(prog: str, run: Callable[[], int], bad_input: tuple[type[BaseException], ...]) -> int:
    """``run()``'s status; 2 for an exception in ``bad_input``, 130 on Ctrl-C, and 1
    for any other exception (an internal failure)."""
    try:
        return run()
    except bad_input as exc:
        print(f"{prog}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the commands' last line of defence: one line, exit 1
        if os.environ.get("PARTITIONER_DEBUG"):
            traceback.print_exc()
        print(f"{prog}: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
