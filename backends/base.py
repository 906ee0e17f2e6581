"""The interface every backend implements, and the registry that finds backends.

A backend turns a plan into something that runs: ``render`` (code per group),
``build`` (compile it), ``run`` (execute it on given values), and optionally
``emit`` (write the rendered code to a directory) and ``resources`` (what the
compiler reports per kernel). The command line reaches backends only through
this interface. Backends are found through the Python
entry-point group ``partitioner.backends``, so a third party adds one by declaring
an entry point in its own package, without editing this project::

    [project.entry-points."partitioner.backends"]
    mybackend = "mypackage.backend:MyBackend"
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import numpy as np

from partitioner.plan import Plan
from partitioner.report import PIPED_WIDTH

ENTRY_POINT_GROUP = "partitioner.backends"


class BackendError(RuntimeError):
    """A backend cannot render, build or run this plan (a custom op, a missing tool or
    device, a directory it may not write); one line."""


@dataclass
class Counters:
    """What a counting run measured (:meth:`Backend.counters`): ``kernels``, one
    JSON-ready dict per kernel, and ``text``, the same as text tables."""

    kernels: list[dict]
    text: str


@dataclass
class Emitted:
    """What :meth:`Backend.emit` wrote: ``files`` (paths), how many ``kernels``, and
    the groups that got none, each ``{"group", "ops", "reason"}``."""

    files: list[Path]
    kernels: int
    no_kernel: list[dict] = field(default_factory=list)


class Backend(ABC):
    """A code generator and runner for plans.

    ``run`` takes and returns *storages* (a view shares its input's storage): it reads
    the values of graph inputs (and of custom ops, which have no semantics) and
    returns every storage the plan's kernels write, by name.
    """

    name: str

    @abstractmethod
    def render(self, plan: Plan) -> Any:
        """Code for every group of ``plan``."""

    @abstractmethod
    def build(self, rendered: Any) -> Any:
        """Compile or otherwise prepare rendered code to run."""

    @abstractmethod
    def run(self, built: Any, storages: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Execute the plan on ``storages``; the storages it writes, by name (every
        graph output's at least)."""

    def preflight(self, compile: bool = False, run: bool = False) -> None:
        """Raise :class:`BackendError` now when this machine cannot compile or run
        what this backend makes (a missing compiler, no GPU): before a plan that may
        take minutes, not after it. Nothing to check by default."""

    def emit(self, rendered: Any, directory: str | Path) -> Emitted:
        """Write the rendered code into ``directory``.

        Raises:
            BackendError: this backend writes no code, or the directory cannot be used.
        """
        raise BackendError(f"the {self.name} backend writes no code")

    def counters(self, width: int = PIPED_WIDTH) -> Counters | None:
        """What the last :meth:`run` counted per kernel, when this backend counts.

        Parameters
        ----------
        width : int
            Columns the text tables may take.

        Returns
        -------
        Counters or None
            Per kernel its memory requests, their efficiency and its instruction
            counts; ``None`` by default (a backend that does not count).
        """
        return None

    def resources(self, built: Any) -> list[dict]:
        """Per kernel, what the compiler reports beside the cost model's estimates:
        ``{"group", "kind", "kernel", "arch", "registers", "registers_estimate",
        "spill_bytes", "shared_memory", "shared_memory_estimate", "status"}``
        (``status`` is ``"OK"`` or names what is over: ``SPILLS``, ``REGISTERS OVER``,
        ``SHARED MEMORY OVER``); empty when nothing was compiled."""
        return []


def available() -> list[str]:
    """Names of the installed backends (entry points in the ``partitioner.backends`` group).

    Returns
    -------
    list of str
        Sorted names, each accepted by :func:`load_backend`.

    Examples
    --------
    >>> available()
    ['cuda', 'numpy']
    """
    return sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))


def load_backend(name: str, **options) -> Backend:
    """An instance of the backend registered as ``name``.

    Parameters
    ----------
    name : str
        A name from :func:`available`.
    **options
        Passed to the backend's constructor (the CUDA backend takes ``arch`` and
        ``emulate``; ``docs/backends.md``).

    Returns
    -------
    Backend
        Renders a plan (:meth:`Backend.render`), builds and runs it, and reports the
        resources its kernels use.

    Raises
    ------
    BackendError
        No backend of that name is installed.

    Examples
    --------
    >>> type(load_backend("numpy")).__name__
    'NumpyBackend'
    >>> load_backend("tpu")
    Traceback (most recent call last):
    ...
    backends.base.BackendError: unknown backend 'tpu'; installed: cuda, numpy
    """
    found = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if not found:
        raise BackendError(f"unknown backend {name!r}; installed: {', '.join(available()) or 'none'}")
    return found[0].load()(**options)
