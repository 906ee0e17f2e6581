"""Probing a kernel's emitted index arithmetic: the global address each access
reads or writes at a chosen point of the iteration space.

Kernel builders use it to order their work so that a warp's accesses are coalesced
(which tile axis the threads step along, whether a pointwise kernel's lanes take
consecutive elements). Only the order of the accesses ever depends on a probe,
never a value: an expression the evaluator cannot follow is simply not counted.
"""

from __future__ import annotations

import re
from functools import lru_cache

from partitioner.cost import WARP

LOADS = re.compile(r"PART_LDG\((\w+)\[([^\[\]]*)\]\)")
STORES = re.compile(r"PART_STG\((\w+)\[([^\[\]]*)\]\)")
_INDEX = re.compile(r"^\s*const idx_t (\w+) = (.*);$")
_LOOP = re.compile(r"^\s*for \(int (\w+) = 0;")


def addresses(lines: list[str], point: dict[str, int], accesses=LOADS) -> dict[tuple[int, int], int]:
    """The element offset of every access matched by ``accesses`` in ``lines`` (C++
    statements of one kernel body, in order), with the index variables of ``point``
    set and every ``const idx_t`` declaration evaluated from them; keyed by (line,
    position in the line). A loop counter from 0 (a pooling window's tap) is taken at
    its first iteration. Accesses whose index cannot be evaluated are left out."""
    env, found = dict(point), {}
    for number, line in enumerate(lines):
        loop = _LOOP.match(line)
        if loop and loop.group(1) not in point:
            env[loop.group(1)] = 0
        declared = _INDEX.match(line)
        if declared and declared.group(1) not in point:
            value = c_integer(declared.group(2), env)
            if value is not None:
                env[declared.group(1)] = value
        for at, (_, index) in enumerate(accesses.findall(line)):
            value = c_integer(index, env)
            if value is not None:
                found[(number, at)] = value
    return found


def sectors(lines: list[str], warps: list[list[dict[str, int]]], itemsize: dict[str, int],
            accesses=LOADS) -> int:
    """The 32-byte sectors the accesses of ``lines`` touch, summed over requests: each
    request is one warp's pass over the body, lane k at the point ``warp[k]``; an
    access's bytes are its element offset times its pointer's ``itemsize`` (buffers
    256-byte aligned, as ``cudaMalloc`` and the emulator place them). Accesses whose
    index cannot be evaluated are not counted."""
    pointers = {(number, at): name for number, line in enumerate(lines)
                for at, (name, _) in enumerate(accesses.findall(line))}
    total = 0
    for warp in warps:
        touched: dict[tuple[int, int], set[int]] = {}
        for point in warp:
            for key, offset in addresses(lines, point, accesses).items():
                size = itemsize[pointers[key]]
                touched.setdefault(key, set()).update(range(offset * size // 32, ((offset + 1) * size - 1) // 32 + 1))
        total += sum(len(found) for found in touched.values())
    return total


def unit_steps(lines: list[str], probe: dict[str, int], axis: str, accesses=LOADS,
               broadcast: bool = False) -> dict[tuple[int, int], int]:
    """Per access, how many of a warp's 32 steps of ``axis`` from ``probe`` (one
    element each) move it to the next or previous element: 32 for an access
    consecutive along ``axis``, 0 for one that stays put or jumps. With
    ``broadcast``, a step that stays put counts too: lanes reading one element are
    coalesced as well (one sector for the warp)."""
    walk = [addresses(lines, {**probe, axis: probe[axis] + step}, accesses) for step in range(WARP + 1)]
    near = (0, 1) if broadcast else (1,)
    steps: dict[tuple[int, int], int] = {}
    for before, after in zip(walk, walk[1:]):
        for key in before:
            if key in after:
                steps[key] = steps.get(key, 0) + (abs(after[key] - before[key]) in near)
    return steps


def c_integer(expression: str, env: dict[str, int]) -> int | None:
    """The value of a C index expression: names, integer literals, ``(idx_t)`` casts,
    parentheses, unary minus and ``!``, ``* / %`` (C's truncating division), ``+ -``,
    comparisons, ``&& ||`` and ``?:``, with C's precedence; None where it holds
    anything else, an unknown name or a division by zero."""
    tokens = _tokens(expression)
    if tokens is None:
        return None
    parser = _Parser(tokens, env)
    try:
        value = parser.conditional()
    except _Unknown:
        return None
    return value if parser.at == len(tokens) else None


@lru_cache(maxsize=4096)
def _tokens(expression: str) -> list[str] | None:
    tokens = _TOKEN.findall(expression.replace("(idx_t)", " "))
    if "".join(tokens) != "".join(expression.replace("(idx_t)", "").split()):
        return None  # a character the tokenizer does not know
    return tokens


_TOKEN = re.compile(r"\d+|\w+|&&|\|\||[<>=!]=|[-+*/%()<>?:!]")
# binary operators by precedence, loosest first (C's order)
_LEVELS = (("||",), ("&&",), ("==", "!="), ("<", ">", "<=", ">="), ("+", "-"), ("*", "/", "%"))


class _Unknown(Exception):
    """The expression holds something the evaluator cannot follow."""


class _Parser:
    """Recursive descent over ``tokens``, evaluating as it goes."""

    def __init__(self, tokens: list[str], env: dict[str, int]):
        self.tokens, self.env, self.at = tokens, env, 0

    def peek(self) -> str | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None or (expected is not None and token != expected):
            raise _Unknown
        self.at += 1
        return token

    def conditional(self) -> int:
        test = self.binary(0)
        if self.peek() != "?":
            return test
        self.take("?")
        then = self.conditional()
        self.take(":")
        otherwise = self.conditional()
        return then if test else otherwise

    def binary(self, level: int) -> int:
        if level == len(_LEVELS):
            return self.unary()
        value = self.binary(level + 1)
        while self.peek() in _LEVELS[level]:
            value = _apply(self.take(), value, self.binary(level + 1))
        return value

    def unary(self) -> int:
        token = self.take()
        if token == "-":
            return -self.unary()
        if token == "!":
            return int(not self.unary())
        if token == "(":
            value = self.conditional()
            self.take(")")
            return value
        if token.isdigit():
            return int(token)
        if token in self.env:
            return self.env[token]
        raise _Unknown


def _apply(operator: str, a: int, b: int) -> int:
    if operator in ("/", "%"):
        if not b:
            raise _Unknown
        quotient = abs(a) // abs(b) * (1 if (a >= 0) == (b > 0) else -1)
        return quotient if operator == "/" else a - quotient * b
    return {"+": a + b, "-": a - b, "*": a * b, "<": int(a < b), ">": int(a > b), "<=": int(a <= b),
            ">=": int(a >= b), "==": int(a == b), "!=": int(a != b), "&&": int(bool(a and b)),
            "||": int(bool(a or b))}[operator]
