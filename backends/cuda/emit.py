"""Write a rendered plan to a directory: one ``.cu`` per group, the device-helper
header they include, and ``manifest.json`` (kernel, launch geometry, arguments)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from ..base import BackendError
from .compile import DEFAULT_ARCH, nvcc_command
from .render import RUNTIME_HEADER, Rendered, runtime_header

MANIFEST = "manifest.json"


class EmitError(BackendError):
    """The output directory holds files this tool did not write."""


_OURS = re.compile(r"g\d{3,}_[a-z]+\.cu")


def _earlier_files(path: Path, rendered: Rendered) -> list[str]:
    """Files an earlier emit wrote here: only names this tool writes, never a path.
    Raises :class:`EmitError` where ``manifest.json`` is none of this tool's (a graph
    of that name, another program's file), which is never overwritten."""
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError):
        manifest = None
    if not (isinstance(manifest, dict) and {*rendered.manifest(), "files"} <= manifest.keys()
            and isinstance(manifest["files"], list)):
        raise EmitError(f"{path / MANIFEST} is not a manifest of this tool; choose a new directory")
    return [f for f in manifest["files"] if isinstance(f, str) and (_OURS.fullmatch(f) or f == RUNTIME_HEADER)]


def write(rendered: Rendered, out: str | Path, arch: str = DEFAULT_ARCH) -> list[Path]:
    """Write the kernels of ``rendered`` into a directory, with a ``manifest.json``.

    A directory that already holds files is only reused when it holds an earlier
    ``manifest.json`` of this tool, whose files are replaced; a file of a name it
    would write that the earlier manifest does not list is never replaced. The manifest gives
    each kernel's nvcc command line for ``arch``.

    Parameters
    ----------
    rendered : Rendered
        From the CUDA backend's ``render``.
    out : str or Path
        The directory; created if missing.
    arch : str
        The target, e.g. ``sm_90``.

    Returns
    -------
    list of Path
        The files written.

    Raises
    ------
    EmitError
        ``out`` is a file, a non-empty directory without a manifest of this tool,
        holds a file of a name it would write that no earlier emit wrote or a
        symbolic link of such a name, or cannot be written.
    """
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise EmitError(f"{path} is a file; give a directory for the kernels")
    if path.is_dir() and any(path.iterdir()) and not (path / MANIFEST).exists():
        raise EmitError(f"{path} is not empty and holds no {MANIFEST} of an earlier emit; choose a new directory")
    names = (RUNTIME_HEADER, *(kernel.file_name for kernel in rendered.kernels))
    for name in (MANIFEST, *names):
        if (path / name).is_symlink():  # writing through it would write outside the directory
            raise EmitError(f"{path / name} is a symbolic link, which emit never writes through; "
                            "choose a new directory")
    earlier = _earlier_files(path, rendered) if (path / MANIFEST).exists() else []
    for name in names:
        if (path / name).exists() and name not in earlier:
            raise EmitError(f"{path / name} was not written by an earlier emit; choose a new directory")
    try:
        return _write(rendered, path, arch, earlier)
    except OSError as exc:
        raise EmitError(f"cannot write the kernels to '{path}': {exc.strerror}") from None


def _write(rendered: Rendered, path: Path, arch: str, earlier: list[str]) -> list[Path]:
    for old in earlier:
        (path / old).unlink(missing_ok=True)
    path.mkdir(parents=True, exist_ok=True)
    files = [path / RUNTIME_HEADER]
    files[0].write_text(runtime_header())
    for kernel in rendered.kernels:
        target = path / kernel.file_name
        target.write_text(kernel.source)
        files.append(target)
    manifest = rendered.manifest()
    manifest["files"] = [f.name for f in files]
    for entry, kernel in zip(manifest["kernels"], rendered.kernels):
        entry["compile"] = " ".join(nvcc_command(kernel.file_name, kernel.file_name[:-3] + ".cubin", arch))
    (path / MANIFEST).write_text(json.dumps(manifest, indent=2))
    return [*files, path / MANIFEST]
