"""The exceptions the library raises on bad input and on illegal plans."""

from __future__ import annotations


class GraphError(ValueError):
    """A graph file or graph dictionary breaks format v1.

    ``str(error)`` is one line naming the file, the op (where one is at fault) and
    the problem; the CLI prints it and exits with status 2.
    """


class InferenceError(ValueError):
    """An op's inputs or attributes are inconsistent (shapes, axes, dtypes).

    Raised by the op registry without file or op context; the loader re-raises it
    as a :class:`GraphError` that names both.
    """


class IllegalPlan(ValueError):
    """A partition breaks a fusion rule, a budget, or is not a partition at all.

    Attributes:
        reason: machine-readable rule code, e.g. ``"contraction.epilogue_shape"``
            (every code is listed in ``docs/legality.md``).
        ops: the op names the violation involves.
    """

    def __init__(self, reason: str, message: str, ops: tuple[str, ...] = ()):
        super().__init__(f"[{reason}] {message}")
        self.reason = reason
        self.ops = tuple(ops)


class HardwareError(ValueError):
    """A hardware profile name is unknown or a profile file is malformed."""
