"""``partition import SOURCE -o OUT.yaml``: an ONNX file or a torch model in, a graph file out.

SOURCE is one of

- ``model.onnx``: an ONNX model (``--dim NAME=VALUE`` binds its dynamic dimensions);
- ``program.pt2``: an ExportedProgram saved with ``torch.export.save``;
- ``package.module:factory`` or ``path/to/file.py:factory``: a callable returning an
  ExportedProgram or a ``(module, example_inputs)`` pair, which is exported here;
  ``--dim NAME=VALUE`` become its keyword arguments (``factory(batch=8)``), each a
  Python literal (``8``, ``0.5``, ``True``, ``'gelu'``) or else the text itself; a
  module is imported from the current folder too, as ``python -m`` would.

The import summary (ops mapped, folded and custom, customs by kind) goes to stderr;
the graph goes to OUT, and its weights and large constants to OUT's ``.npz`` side
file (format 1.1; ``--no-values`` leaves it out); neither is ever overwritten
without ``--force``. Exit status
0, or 2 with one line on stderr for bad input, 1 on an internal failure.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import importlib.util
import os
import sys
from pathlib import Path

from . import __version__
from .errors import GraphError
from .exits import OneLineParser, guarded, note, unwritable
from .importers import ImportResult, extra, report, to_yaml
from .values import write_side_file


def _dim(text: str) -> tuple[str, str]:
    name, sep, value = (part.strip() for part in text.partition("="))
    if not (sep and name and value):
        raise argparse.ArgumentTypeError(f"--dim takes NAME=VALUE, got {text!r}")
    return name, value


#: The largest ONNX dimension --dim binds: 2^40 elements is the format's limit on a
#: whole tensor (a larger one overflowed ONNX's int64 dims, an exit 1).
MAX_DIM = 2**40


def _onnx_dims(dims: list[tuple[str, str]]) -> dict[str, int]:
    """ONNX dimensions are sizes: non-negative integers up to :data:`MAX_DIM`, each
    bound once (raises GraphError)."""
    bound: dict[str, int] = {}
    for name, value in dims:
        # a size holds no '=', a dim_param may ("n=2"): the value follows the last one
        name, _, value = f"{name}={value}".rpartition("=")
        if not value.isdigit() or int(value) > MAX_DIM:
            raise GraphError(f"--dim {name}={value}: an ONNX dimension takes an integer from 0 to 2^40")
        if name in bound and bound[name] != int(value):
            raise GraphError(f"--dim {name} is given twice ({bound[name]} and {value})")
        bound[name] = int(value)
    return bound


def _factory_kwargs(dims: list[tuple[str, str]]) -> dict[str, object]:
    """A factory's keyword arguments: Python literals (``8``, ``0.5``, ``True``,
    ``'gelu'``), or the text itself when it is not one (``act=gelu``)."""
    kwargs: dict[str, object] = {}
    for name, value in dims:
        if name in kwargs:
            raise GraphError(f"--dim {name} is given twice")
        try:
            kwargs[name] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            kwargs[name] = value
    return kwargs


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="partition import",
                description="Import an ONNX model or a torch.export program as a graph file (format v1).",
                epilog="SOURCE: model.onnx | program.pt2 (torch.export.save) | package.module:factory | "
                       "file.py:factory (returns an ExportedProgram or (module, example_inputs)). "
                       "The import summary is printed on stderr. See docs/importers.md.")
    p.add_argument("source", help="a .onnx file, a .pt2 file, or MODULE:FACTORY")
    p.add_argument("-o", "--output", required=True, metavar="OUT.yaml", help="graph file to write")
    p.add_argument("--dim", type=_dim, action="append", default=[], metavar="NAME=VALUE",
                   help="bind an ONNX dynamic dimension, or pass a keyword argument to a torch factory (repeatable)")
    p.add_argument("--name", help="the graph's name (default: OUT's file name without its suffix)")
    p.add_argument("--force", action="store_true", help="overwrite OUT (and its .npz) if it exists")
    p.add_argument("--no-values", action="store_true",
                   help="do not write the weights and large constants to OUT's .npz side file (a run then draws "
                        "them at random)")
    p.add_argument("--version", action="version", version=f"partition {__version__}")
    return p


def _factory(spec: str):
    """The callable named by ``module:attr`` or ``file.py:attr`` (raises GraphError)."""
    where, _, attr = spec.rpartition(":")
    try:
        if where.endswith(".py"):
            module_spec = importlib.util.spec_from_file_location(Path(where).stem, where)
            if module_spec is None or not Path(where).is_file():
                raise GraphError(f"{where}: no such file")
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[module_spec.name] = module  # as an import would: dataclasses and pickling look it up
            module_spec.loader.exec_module(module)
        else:
            if os.getcwd() not in sys.path:  # as `python -m` does: the user's own packages import
                sys.path.insert(0, os.getcwd())
            module = importlib.import_module(where)
        return getattr(module, attr)
    except GraphError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's module may raise anything while it is imported
        raise GraphError(f"{spec}: cannot load the factory ({type(exc).__name__}: {exc})") from None


def _archive_error(source: str) -> Exception | None:
    """Why the archive reader refused ``source``: ``torch.export.load`` logs it (held
    back by ``quiet``) and raises "Please check the warnings above", which the user
    cannot see. ``None`` where it reads, or where this torch has no such reader."""
    try:
        from torch.export.pt2_archive._package import load_pt2

        load_pt2(source)
    except ImportError:
        return None
    except Exception as exc:  # noqa: BLE001 - torch raises several types for a bad archive
        return exc
    return None


def _torch_program(torch_importer, source: str, kwargs: dict[str, object]):
    """The ExportedProgram for a ``.pt2`` file or a factory (raises GraphError)."""
    import torch  # the torch extra is present: extra("torch") succeeded

    if source.endswith(".pt2"):
        if kwargs:
            raise GraphError(f"{source}: --dim binds ONNX dimensions or factory arguments; "
                             "a saved program has static shapes")
        if not Path(source).is_file():
            raise GraphError(f"{source}: no such file")
        try:
            with torch_importer.quiet():  # torch logs the archive's traceback before raising
                return torch.export.load(source)
        except Exception as exc:  # noqa: BLE001 - torch raises several types for a bad archive
            cause = (_archive_error(source) if "warnings above" in str(exc) else None) or exc
            raise GraphError(f"{source}: not a torch.export program ({type(cause).__name__}: "
                             f"{' '.join(str(cause).split())})") from None
    factory = _factory(source)
    try:
        with contextlib.redirect_stdout(sys.stderr):  # what it prints is no graph: stdout stays empty
            made = factory(**kwargs)
    except SystemExit as exc:  # sys.exit() in the factory ended the import without a word, status 0
        raise GraphError(f"{source}: the factory called sys.exit({exc.code!r}) instead of returning") from None
    except Exception as exc:  # noqa: BLE001 - the user's factory may raise anything
        raise GraphError(f"{source}: the factory raised {type(exc).__name__}: {exc}") from None
    if isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], torch.nn.Module):
        try:
            return torch_importer.program_of(*made)
        except Exception as exc:  # noqa: BLE001 - torch.export raises many types for unsupported models
            raise GraphError(f"{source}: torch.export failed: {type(exc).__name__}: "
                             f"{' '.join(str(exc).split())[:300]}") from None
    if isinstance(made, torch.export.ExportedProgram):
        return made
    raise GraphError(f"{source}: the factory must return an ExportedProgram or (module, example_inputs), "
                     f"got {type(made).__name__}")


def _convert(args: argparse.Namespace, name: str) -> ImportResult:
    if args.source.endswith(".onnx"):
        return extra("onnx").convert(args.source, _onnx_dims(args.dim), name)
    if not (args.source.endswith(".pt2") or ":" in args.source):
        raise GraphError(f"{args.source}: SOURCE must be a .onnx file, a .pt2 file or MODULE:FACTORY")
    torch_importer = extra("torch")
    dims = _factory_kwargs(args.dim)
    program = _torch_program(torch_importer, args.source, dims)
    call = f"({', '.join(f'{k}={v!r}' for k, v in dims.items())})" if ":" in args.source else ""
    try:
        return torch_importer.convert(program, name, f"{args.source}{call} via {torch_importer.SOURCE}")
    except GraphError as exc:  # the converter knows no file: name the source it came from
        raise GraphError(f"{args.source}: {str(exc).removeprefix('<torch>: ')}") from None


def _run(args: argparse.Namespace) -> int:
    problem = unwritable(args.output)  # (of the text: a Path drops a trailing '/')
    out = Path(args.output)
    if out.exists() and not args.force:
        raise GraphError(f"{out}: exists; pass --force to overwrite it")
    if out.suffix.lower() not in (".yaml", ".yml"):
        raise GraphError(f"{out}: the output must be a .yaml or .yml file")
    if problem:
        raise GraphError(f"{out}: {problem}")
    result = _convert(args, args.name or out.stem)
    try:
        result.load()  # every rule of the loader, before anything is written
    except GraphError as exc:  # the imported graph has no file yet: name the source
        raise GraphError(f"{args.source}: {str(exc).removeprefix('<graph>: ')}") from None
    report(result)  # after the load: a graph it refuses gets one line, the error
    side = out.with_suffix(".npz")
    keep = bool(result.values) and not args.no_values
    if keep and side.exists() and not args.force:
        raise GraphError(f"{side}: exists; pass --force to overwrite it")
    target = side
    try:
        if keep:
            write_side_file(side, result.values)
            result.graph.update(format=1.1, values=side.name)
        target = out
        out.write_text(to_yaml(result.graph, [f"Imported from {args.source} by `partition import` ({__version__})."]))
    except OSError as exc:  # its filename is None where the write itself fails (a full disk)
        raise GraphError(f"{target}: cannot write it: {exc.strerror}") from None
    megabytes = sum(a.nbytes for a in result.values.values()) / 1e6
    values = (f"; {len(result.values)} constant(s) of {megabytes:,.1f} MB in {side}" if keep else
              f"; {len(result.values)} constant(s) of {megabytes:,.1f} MB not written (--no-values): a run draws them "
              "at random" if result.values else "")
    note(f"wrote {out} ({len(result.graph['ops'])} ops){values}")
    return 0


def main(argv: list[str]) -> int:
    """``partition import ...`` (``argv`` without the word ``import``)."""
    args = _parser().parse_args(argv)
    return guarded("partition import", lambda: _run(args), (GraphError, ImportError))
