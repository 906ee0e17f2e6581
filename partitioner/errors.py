"""The exceptions the library raises on bad input and on illegal plans."""

from __future__ import annotations


class GraphError(ValueError):
    """A graph file or graph dictionary breaks format v1.

    ``str(error)`` is one line naming the file, the op (where one is at fault) and
    the problem; the CLI prints it and exits with status 2.
    """


class SizeError(GraphError):
    """A graph's sizes are beyond what the ILP's exact 64-bit integer objective can
    hold (the loader's per-tensor limit keeps single tensors below it; a graph of
    many large tensors can still exceed it)."""


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
        message: the explanation, one line.
        ops: the op names the violation involves.
        used, limit: for a ``budget.*`` code, the estimate and the limit it exceeds.
    """

    def __init__(self, reason: str, message: str, ops: tuple[str, ...] = (), used: int | None = None,
                 limit: int | None = None):
        super().__init__(f"[{reason}] {message}")
        self.reason = reason
        self.message = message
        self.ops = tuple(ops)
        self.used, self.limit = used, limit


class HardwareError(ValueError):
    """A hardware profile name is unknown or a profile file is malformed."""
