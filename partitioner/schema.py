"""JSON Schema of graph format v1.1: the structure of a file, before any semantics.

Op kinds, attribute types, names and shapes are checked afterwards by
``loader.py`` so that its messages can name the op and the problem precisely.
"""

from __future__ import annotations

import jsonschema

from .dtypes import DTYPES

_SHAPE = {"type": "array", "items": {"type": "integer", "minimum": 0}}
_DTYPE = {"enum": list(DTYPES)}
_NAME = {"type": "string"}

GRAPH_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "required": ["ops", "outputs"],
    "properties": {
        "format": {"type": "number", "minimum": 1},
        "name": _NAME,
        "source": {"type": "string"},
        "dtype": _DTYPE,
        "inputs": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name", "shape"],
                "properties": {"name": _NAME, "shape": _SHAPE, "dtype": _DTYPE, "value": {}},
            },
        },
        "ops": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name", "op"],
                "properties": {
                    "name": _NAME,
                    "op": {"type": "string"},
                    "inputs": {
                        "type": "array",
                        "items": {"anyOf": [{"type": "string"}, {"type": "number"}]},
                    },
                    "attrs": {"type": "object"},
                    "shape": _SHAPE,
                    "dtype": _DTYPE,
                },
            },
        },
        "outputs": {"type": "array", "items": _NAME},
        "values": {"type": "string"},
    },
}


def _is_integer(checker, value) -> bool:
    # JSON Schema counts 4.0 as an integer; a shape or a count of 4.0 is not one here.
    return isinstance(value, int) and not isinstance(value, bool)


_Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer),
)


def validator(schema: dict = GRAPH_SCHEMA) -> jsonschema.protocols.Validator:
    """A JSON Schema validator for ``schema`` in which only Python ints are integers."""
    return _Validator(schema)
