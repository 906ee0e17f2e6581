"""YAML (and JSON) reading with YAML 1.2 core-schema scalars, shared by graph and
hardware files.

PyYAML implements YAML 1.1, where ``010`` is octal 8, ``1:30`` is 90, ``2001-12-14``
is a date, ``on``/``no`` are booleans and ``1e-5`` is a string. Graph files follow
YAML 1.2: decimal integers, floats with or without a dot, only ``true``/``false``
booleans, no timestamps. A key given twice in one mapping is an error.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat

import yaml

_BOOL = "tag:yaml.org,2002:bool"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"


def yaml_loader(base: type) -> type:
    """A loader of YAML 1.2 core-schema scalars over PyYAML's ``base`` (a safe
    loader): no duplicate keys, decimal integers, floats with or without a dot, only
    ``true``/``false`` booleans, no timestamps."""

    class Loader(base):
        def construct_mapping(self, node, deep=False):
            self.flatten_mapping(node)  # resolve merge keys ("<<") before looking for duplicates
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if isinstance(key, (list, dict)):
                    raise yaml.constructor.ConstructorError(
                        None, None, "a mapping's key must be a scalar, not a list or a mapping", key_node.start_mark
                    )
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {key!r} appears twice in one mapping", key_node.start_mark
                    )
                seen.add(key)
            return super().construct_mapping(node, deep)

        def construct_yaml_int(self, node):
            value = self.construct_scalar(node)
            return int(value, 0) if value.lstrip("+-").startswith(("0x", "0o")) else int(value)

    Loader.yaml_implicit_resolvers = {
        first: [(tag, rx) for tag, rx in resolvers if tag not in (_BOOL, _INT, _FLOAT, _TIMESTAMP)]
        for first, resolvers in base.yaml_implicit_resolvers.items()
    }
    Loader.add_implicit_resolver(_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
    Loader.add_implicit_resolver(_INT, re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"),
                                 list("-+0123456789"))
    Loader.add_implicit_resolver(
        _FLOAT,
        re.compile(
            r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
            r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
        ),
        list("-+0123456789."),
    )
    Loader.add_constructor(_INT, Loader.construct_yaml_int)
    return Loader


#: Over libyaml's parser where PyYAML was built with it (a 32-layer Llama's 400 kB
#: graph parses in 0.7 CPU s against 2.4 with PyYAML's own), else PyYAML's; the
#: constructor and resolvers are Python either way, so both read the same values.
_Loader = yaml_loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader))


#: Most values a document may expand to, its aliases copied out: a 32-layer Llama's
#: graph holds about 200,000; nine nested aliases of nine items each ("billion
#: laughs") hold 387 million, which reading would take minutes and gigabytes over.
MAX_EXPANDED_VALUES = 10_000_000


def parse_yaml(text: str):
    """Parse ``text`` as YAML 1.2 (core schema). Raises ``yaml.YAMLError`` (also for
    a document of more than :data:`MAX_EXPANDED_VALUES` values once its aliases are
    expanded) and ``RecursionError`` (absurdly deep nesting)."""
    data = yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    if _expanded(data, {}) > MAX_EXPANDED_VALUES:
        raise yaml.YAMLError(f"the document expands to more than {MAX_EXPANDED_VALUES:,} values through its "
                             "aliases (*name)")
    return data


def _expanded(value, sizes: dict[int, int]) -> int:
    """The values ``value`` holds, each alias's target counted where it is used
    (``sizes``: by object, so each shared one is walked once)."""
    if not isinstance(value, (list, dict)):
        return 1
    known = sizes.get(id(value))
    if known is None:
        items = value.values() if isinstance(value, dict) else value
        known = sizes[id(value)] = 1 + len(value) + sum(_expanded(v, sizes) for v in items
                                                        if isinstance(v, (list, dict)))
    return known


def yaml_error_message(exc: yaml.YAMLError) -> str:
    """One line: where (line, column) and what."""
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = getattr(exc, "problem", None) or str(exc)
    return f"malformed YAML{where}: {' '.join(str(problem).split())}"


#: The longest graph or profile file read, 256 MiB: the largest graphs written are
#: under 1 MB (weights go to the .npz side file), and an endless file (a link to
#: /dev/zero) would otherwise fill memory before the parser saw it.
MAX_TEXT_BYTES = 1 << 28


def read_text(path) -> str:
    """A file's text as UTF-8, at most :data:`MAX_TEXT_BYTES`. Raises ``OSError``
    (``EFBIG`` for a longer file, ``ENODEV`` for a device) or ``UnicodeDecodeError``."""
    return read_bytes(path, MAX_TEXT_BYTES, "far more than a graph or profile holds").decode("utf-8")


def read_bytes(path, limit: int, why: str) -> bytes:
    """A file's bytes, at most ``limit`` of them. Raises ``OSError``: ``ENODEV`` for
    a device (``/dev/zero`` never ends; a pipe is read, up to the limit), ``EFBIG``
    past the limit, saying ``why`` it is one."""
    with open(path, "rb") as f:
        mode = os.fstat(f.fileno()).st_mode
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
            raise OSError(errno.ENODEV, "it is a device, not a file")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"longer than {limit >> 20} MiB, {why}")
    return data


def read_error_message(exc: Exception) -> str:
    """One line for a file that cannot be read."""
    if isinstance(exc, UnicodeDecodeError):
        return f"cannot read the file: not UTF-8 text (byte {exc.start})"
    if isinstance(exc, OSError):
        return f"cannot read the file: {exc.strerror or exc}"
    return f"cannot read the file: {exc}"


def parse_document(text: str, suffix: str):
    """A file's text as JSON for a ``.json`` ``suffix`` (no key twice in one
    object), else as YAML 1.2 (:func:`parse_yaml`). Raises ``ValueError``
    (``json.JSONDecodeError``, a key twice), ``yaml.YAMLError`` and ``RecursionError``."""
    if suffix.lower() == ".json":
        return json.loads(text, object_pairs_hook=_reject_duplicate_keys)
    return parse_yaml(text)


def parse_error_message(exc: ValueError | yaml.YAMLError) -> str:
    """One line for a document :func:`parse_document` cannot read: where and what."""
    if isinstance(exc, json.JSONDecodeError):
        return f"malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
    if isinstance(exc, yaml.YAMLError):
        return yaml_error_message(exc)
    return f"malformed JSON: {exc}"


def _reject_duplicate_keys(pairs):
    out = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key!r} appears twice in one object")
        out[key] = value
    return out
