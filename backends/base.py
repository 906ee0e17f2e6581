"""The interface every backend implements, and the registry that finds backends.

A backend turns a plan into something that runs: ``render`` (code per group),
``build`` (compile it), ``run`` (execute it on given values) and ``resources``
(what the compiler reports per group). Backends are found through the Python
entry-point group ``partitioner.backends``, so a third party adds one by declaring
an entry point in its own package, without editing this project::

    [project.entry-points."partitioner.backends"]
    mybackend = "mypackage.backend:MyBackend"
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from importlib.metadata import entry_points
from typing import Any

import numpy as np

from partitioner.plan import Plan

ENTRY_POINT_GROUP = "partitioner.backends"


class BackendError(RuntimeError):
    """A backend cannot run this plan (a custom op, a missing tool or device); one line."""


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
        """Execute the plan on ``storages``; every storage it writes, by name."""

    def resources(self, built: Any) -> dict[int, dict]:
        """Group index -> what the compiler reports (registers, spills, shared memory)."""
        return {}


def available() -> list[str]:
    """Names of the installed backends."""
    return sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))


def load_backend(name: str, **options) -> Backend:
    """An instance of the backend registered as ``name``; ``options`` go to its constructor.

    Raises:
        BackendError: no backend of that name is installed.
    """
    found = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if not found:
        raise BackendError(f"unknown backend {name!r}; installed: {', '.join(available()) or 'none'}")
    return found[0].load()(**options)
