"""Probing a kernel's emitted index arithmetic: the global address each access
reads or writes at a chosen point of the iteration space.

Kernel builders use it to order their work so that a warp's accesses are coalesced
(which tile axis the threads step along, whether a pointwise kernel's lanes take
consecutive elements). Only the order of the accesses ever depends on a probe,
never a value: an expression the evaluator cannot follow is simply not counted.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
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


def sectors(lines: list[str], warps: list[list[dict[str, int]]], itemsize: dict[str, int]) -> int:
    """The 32-byte sectors the global reads of ``lines`` touch, summed over requests: each
    request is one warp's pass over the body, lane k at the point ``warp[k]``; an
    access's bytes are its element offset times its pointer's ``itemsize`` (buffers
    256-byte aligned, as ``cudaMalloc`` and the emulator place them). Accesses whose
    index cannot be evaluated are not counted."""
    pointers = {(number, at): name for number, line in enumerate(lines)
                for at, (name, _) in enumerate(LOADS.findall(line))}
    total = 0
    for warp in warps:
        touched: dict[tuple[int, int], set[int]] = {}
        for point in warp:
            for key, offset in addresses(lines, point).items():
                size = itemsize[pointers[key]]
                touched.setdefault(key, set()).update(range(offset * size // 32, ((offset + 1) * size - 1) // 32 + 1))
        total += sum(len(found) for found in touched.values())
    return total


def coalesced_steps(lines: list[str], probe: dict[str, int], axis: str, accesses=LOADS) -> dict[tuple[int, int], int]:
    """Per access, how many of a warp's 32 steps of ``axis`` from ``probe`` (one
    element each) keep it coalesced: moved to the next or previous element, or kept
    on the same one (lanes reading one element make one sector for the warp). 32 for
    an access consecutive along ``axis`` or independent of it, 0 for one that jumps."""
    walk = [addresses(lines, {**probe, axis: probe[axis] + step}, accesses) for step in range(WARP + 1)]
    steps: dict[tuple[int, int], int] = {}
    for before, after in zip(walk, walk[1:]):
        for key in before:
            if key in after:
                steps[key] = steps.get(key, 0) + (abs(after[key] - before[key]) <= 1)
    return steps


def c_integer(expression: str, env: dict[str, int]) -> int | None:
    """The value of a C index expression: names, integer literals, ``(idx_t)`` casts,
    parentheses, unary minus and ``!``, ``* / %`` (C's truncating division), ``+ -``,
    comparisons, ``&& ||`` and ``?:``, with C's precedence; None where it holds
    anything else, an unknown name or a division by zero."""
    return _parse(expression, _Integers(env))


def contiguous_runs(lines: list[str], index: str, fast: str, vec: int) -> bool:
    """Whether index expression ``index`` (after the ``const idx_t`` declarations of
    ``lines``) steps by exactly one element over every run of ``vec`` consecutive
    values of the index variable ``fast`` that starts at a multiple of ``vec``, from
    a multiple of ``vec``: whether ``vec`` elements from such a start are one aligned
    vector in memory. Proved, not sampled, after Triton's contiguity and divisibility
    analysis: over a run, each subexpression is either constant, with a known divisor,
    or the run's own offset plus a base with a known divisor; ``+``, ``*`` by 1 and
    ``/``, ``%`` by multiples of ``vec`` keep the form (every value is a sum of
    non-negative terms, so C's truncating division is floor division). Any other
    variable is constant over the run; a subtraction, comparison or select is not
    followed (False)."""
    algebra = _Runs(fast, vec)
    for line in lines:
        declared = _INDEX.match(line)
        if declared:
            algebra.env[declared.group(1)] = _parse(declared.group(2), algebra)
    found = _parse(index, algebra)
    return found is not None and found.linear and found.divisor % vec == 0


def _parse(expression: str, algebra):
    tokens = _tokens(expression)
    if tokens is None:
        return None
    parser = _Parser(tokens, algebra)
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
    """Recursive descent over ``tokens`` with C's precedence, computing in ``algebra``
    as it goes (its ``literal``, ``name``, ``binary``, ``negate``, ``logical_not``,
    ``select``)."""

    def __init__(self, tokens: list[str], algebra):
        self.tokens, self.algebra, self.at = tokens, algebra, 0

    def peek(self) -> str | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None or (expected is not None and token != expected):
            raise _Unknown
        self.at += 1
        return token

    def conditional(self):
        test = self.binary(0)
        if self.peek() != "?":
            return test
        self.take("?")
        then = self.conditional()
        self.take(":")
        otherwise = self.conditional()
        return self.algebra.select(test, then, otherwise)

    def binary(self, level: int):
        if level == len(_LEVELS):
            return self.unary()
        value = self.binary(level + 1)
        while self.peek() in _LEVELS[level]:
            value = self.algebra.binary(self.take(), value, self.binary(level + 1))
        return value

    def unary(self):
        token = self.take()
        if token == "-":
            return self.algebra.negate(self.unary())
        if token == "!":
            return self.algebra.logical_not(self.unary())
        if token == "(":
            value = self.conditional()
            self.take(")")
            return value
        if token.isdigit():
            return self.algebra.literal(int(token))
        return self.algebra.name(token)


class _Integers:
    """C's integer arithmetic on known values."""

    def __init__(self, env: dict[str, int]):
        self.env = env

    def literal(self, value: int) -> int:
        return value

    def name(self, token: str) -> int:
        if token not in self.env:
            raise _Unknown
        return self.env[token]

    def negate(self, a: int) -> int:
        return -a

    def logical_not(self, a: int) -> int:
        return int(not a)

    def select(self, test: int, then: int, otherwise: int) -> int:
        return then if test else otherwise

    def binary(self, operator: str, a: int, b: int) -> int:
        if operator in ("/", "%"):
            if not b:
                raise _Unknown
            quotient = abs(a) // abs(b) * (1 if (a >= 0) == (b > 0) else -1)
            return quotient if operator == "/" else a - quotient * b
        return {"+": a + b, "-": a - b, "*": a * b, "<": int(a < b), ">": int(a > b), "<=": int(a <= b),
                ">=": int(a >= b), "==": int(a == b), "!=": int(a != b), "&&": int(bool(a and b)),
                "||": int(bool(a or b))}[operator]


@dataclass(frozen=True)
class _Run:
    """A subexpression over a run: ``linear`` (the run's offset plus a base) or
    constant; the base (or the constant) a multiple of ``divisor`` (0: it is 0);
    ``value``: the constant when it is a literal's."""

    linear: bool
    divisor: int
    value: int | None = None


class _Runs:
    """The run algebra of ``contiguous_runs``: ``env`` holds the declared variables'
    runs (None: not followed); any other name is constant over a run."""

    def __init__(self, fast: str, vec: int):
        self.fast, self.vec = fast, vec
        self.env: dict[str, _Run | None] = {}

    def literal(self, value: int) -> _Run:
        return _Run(False, value, value)

    def name(self, token: str) -> _Run:
        if token == self.fast:
            return _Run(True, self.vec)
        if token in self.env:
            if self.env[token] is None:
                raise _Unknown
            return self.env[token]
        return _Run(False, 1)

    def negate(self, a: _Run) -> _Run:
        raise _Unknown  # a negative term would make C's truncating division differ from floor

    def logical_not(self, a: _Run) -> _Run:
        raise _Unknown

    def select(self, test: _Run, then: _Run, otherwise: _Run) -> _Run:
        raise _Unknown

    def binary(self, operator: str, a: _Run, b: _Run) -> _Run:
        if operator == "+" and not (a.linear and b.linear):
            value = a.value + b.value if a.value is not None and b.value is not None else None
            return _Run(a.linear or b.linear, math.gcd(a.divisor, b.divisor), value)
        if operator == "*":
            if a.linear and b.value == 1 or b.linear and a.value == 1:
                return a if a.linear else b
            if not (a.linear or b.linear):
                value = a.value * b.value if a.value is not None and b.value is not None else None
                return _Run(False, a.divisor * b.divisor, value)
        if operator in ("/", "%") and b.value and not b.linear:
            return self._divide(operator, a, b.value)
        raise _Unknown

    def _divide(self, operator: str, a: _Run, k: int) -> _Run:
        if not a.linear:
            if a.value is not None:
                value = a.value // k if operator == "/" else a.value % k
                return _Run(False, value, value)
            divisor = (a.divisor // k if a.divisor % k == 0 else 1) if operator == "/" else math.gcd(a.divisor, k)
            return _Run(False, divisor)
        # base + r, r < vec: with the base and k multiples of vec, base % k <= k - vec, so
        # the quotient stays put over the run and the remainder steps with r
        if k % self.vec or a.divisor % self.vec:
            raise _Unknown
        if operator == "/":
            return _Run(False, a.divisor // k if a.divisor % k == 0 else 1)
        return _Run(True, math.gcd(a.divisor, k))


def fast_axis(lines: list[str], probe: dict[str, int], axes: tuple[str, str], accesses=LOADS) -> str:
    """Which of the tile coordinates ``axes`` (``("m", "k")`` for A) keeps more of an
    operand's global reads (or the epilogue's stores, ``accesses=STORES``) coalesced
    over a warp's 32 steps: at the next element or the same one
    (:func:`coalesced_steps`; a 3x3 conv's k runs 3 elements, then jumps; its m runs
    along a row of pixels; a batch norm's per-channel parameters in the prologue are
    coalesced along both). On a tie the second axis, the default, is kept. Only the
    order of the accesses depends on it, never a value."""
    unit = {axis: sum(coalesced_steps(lines, probe, axis, accesses).values()) for axis in axes}
    return axes[0] if unit[axes[0]] > unit[axes[1]] else axes[1]
