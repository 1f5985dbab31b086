"""DynamoDB's expression language, for the subset the lease store writes, with DynamoDB's semantics.

Written from the DynamoDB Developer Guide ("Condition expressions", "Update expressions",
"Expression attribute names/values", "Comparison operator and function reference"):

- A condition is terms joined by ``AND``; a term is ``attribute_exists(path)``,
  ``attribute_not_exists(path)`` or ``operand = operand`` / ``operand <> operand``. A comparison
  with a missing attribute is false for ``=`` and true for ``<>`` (a missing value equals nothing);
  values of different types are never equal; numbers compare by value, sets as sets.
- An update is ``SET path = operand[ + operand], ...``, ``REMOVE path, ...`` and ``ADD path :value,
  ...``, each clause at most once. Every right-hand side is read from the item as it was before the
  update; ``+`` needs two numbers that exist; ``ADD`` adds to a number (or starts it at the value);
  no two actions may name the same path, and no action may name the key attribute.
- A path is one top-level attribute: a bare name (never a reserved word: ddb_reserved_words.txt) or
  a ``#placeholder``; values are ``:placeholders``. Every name and value the request gives must be
  used, and every one used must be given.

A request DynamoDB would reject raises :class:`ExpressionInvalidError` (the server answers
ValidationException with its message). Anything outside the subset -- ``OR``, ``NOT``, parentheses,
``<``, other functions, nested paths, ``DELETE`` -- raises :class:`UnmodelledExpressionError`: the model
never guesses at DynamoDB's meaning, so a product change that writes new syntax fails the
simulation loudly until the model learns it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

Item = Mapping[str, Any]  # attribute name -> AttributeValue ({"S": ...}, {"N": ...}, ...)

RESERVED = frozenset(
    line.strip().upper()
    for line in (Path(__file__).parent / "ddb_reserved_words.txt").read_text().splitlines()
    if line.strip() and not line.startswith("#")
)
FUNCTIONS = ("attribute_exists", "attribute_not_exists")
CONDITION, UPDATE = "ConditionExpression", "UpdateExpression"
_TOKEN = re.compile(r"\s*(?:(<>|=|\+|,|\(|\))|([#:]?[A-Za-z0-9_]+)|(\S))")


class ExpressionInvalidError(Exception):
    """DynamoDB rejects the request: the message of its ValidationException."""


class UnmodelledExpressionError(NotImplementedError):
    """Syntax outside the modelled subset (possibly valid DynamoDB): the model refuses to guess."""


@dataclass(frozen=True)
class Operand:
    text: str  # a bare name, a #name or a :value

    @property
    def is_value(self) -> bool:
        return self.text.startswith(":")


@dataclass(frozen=True)
class Term:
    kind: str  # "attribute_exists" | "attribute_not_exists" | "=" | "<>"
    left: Operand
    right: Operand | None = None


@dataclass(frozen=True)
class Action:
    clause: str  # "SET" | "REMOVE" | "ADD"
    path: Operand
    value: tuple[Operand, ...] = ()  # SET: one operand, or two added; ADD: one value


def _tokens(expression: str) -> list[str]:
    tokens: list[str] = []
    position = 0
    while position < len(expression):
        match = _TOKEN.match(expression, position)
        if match is None:
            break  # trailing whitespace
        symbol, word, other = match.groups()
        if other is not None:
            raise UnmodelledExpressionError(f"{other!r} in {expression!r} is outside the modelled subset")
        tokens.append(symbol or word)
        position = match.end()
    return tokens


def _path(token: str, expression: str, label: str) -> Operand:
    if token.startswith(":"):
        raise ExpressionInvalidError(
            f"Invalid expression: a value is not a document path: {token} in {expression}"
        )
    if not token.startswith("#"):
        if token.upper() in RESERVED:
            raise ExpressionInvalidError(
                f"Invalid {label}: Attribute name is a reserved keyword; reserved keyword: {token}"
            )
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", token):
            raise ExpressionInvalidError(f"Invalid expression: syntax error near {token!r} in {expression}")
    return Operand(token)


def _operand(token: str, expression: str, label: str) -> Operand:
    return Operand(token) if token.startswith(":") else _path(token, expression, label)


@functools.lru_cache(maxsize=256)
def parse_condition(expression: str) -> tuple[Term, ...]:
    tokens = _tokens(expression)
    terms: list[Term] = []
    i = 0
    while True:
        if i >= len(tokens):
            raise ExpressionInvalidError(f"Invalid ConditionExpression: unexpected end: {expression}")
        word = tokens[i]
        if word.upper() in ("OR", "NOT", "BETWEEN", "IN") or word == "(":
            raise UnmodelledExpressionError(f"{word} in {expression!r} is outside the modelled subset")
        if i + 1 < len(tokens) and tokens[i + 1] == "(":
            if word not in FUNCTIONS:
                raise UnmodelledExpressionError(f"function {word} in {expression!r} is not modelled")
            if i + 3 >= len(tokens) or tokens[i + 3] != ")":
                raise UnmodelledExpressionError(f"arguments of {word} in {expression!r} are not modelled")
            terms.append(Term(word, _path(tokens[i + 2], expression, CONDITION)))
            i += 4
        else:
            if i + 2 >= len(tokens) or tokens[i + 1] not in ("=", "<>"):
                near = tokens[i + 1] if i + 1 < len(tokens) else "end"
                raise UnmodelledExpressionError(f"comparison {near!r} in {expression!r} is not modelled")
            terms.append(
                Term(
                    tokens[i + 1],
                    _operand(word, expression, CONDITION),
                    _operand(tokens[i + 2], expression, CONDITION),
                )
            )
            i += 3
        if i == len(tokens):
            return tuple(terms)
        if tokens[i].upper() != "AND":
            raise UnmodelledExpressionError(f"{tokens[i]!r} in {expression!r} is outside the modelled subset")
        i += 1


@functools.lru_cache(maxsize=256)
def parse_update(expression: str) -> tuple[Action, ...]:
    tokens = _tokens(expression)
    actions: list[Action] = []
    seen: set[str] = set()
    i = 0
    while i < len(tokens):
        clause = tokens[i].upper()
        if clause not in ("SET", "REMOVE", "ADD"):
            raise UnmodelledExpressionError(
                f"{tokens[i]!r} in {expression!r}: only SET, REMOVE and ADD are modelled"
            )
        if clause in seen:
            raise ExpressionInvalidError(
                f'Invalid UpdateExpression: The "{clause}" section can only be used once in an update expression;'
            )
        seen.add(clause)
        i += 1
        while True:
            if i >= len(tokens):
                raise ExpressionInvalidError(f"Invalid UpdateExpression: unexpected end: {expression}")
            path = _path(tokens[i], expression, UPDATE)
            if clause == "REMOVE":
                actions.append(Action(clause, path))
                i += 1
            elif clause == "ADD":
                if i + 1 >= len(tokens) or not tokens[i + 1].startswith(":"):
                    raise UnmodelledExpressionError(f"ADD without a :value in {expression!r} is not modelled")
                actions.append(Action(clause, path, (Operand(tokens[i + 1]),)))
                i += 2
            else:
                if i + 2 >= len(tokens) or tokens[i + 1] != "=":
                    raise ExpressionInvalidError(
                        f"Invalid UpdateExpression: SET needs path = value: {expression}"
                    )
                value = [_operand(tokens[i + 2], expression, UPDATE)]
                i += 3
                if i < len(tokens) and tokens[i] == "+":
                    if i + 1 >= len(tokens):
                        raise ExpressionInvalidError(
                            f"Invalid UpdateExpression: unexpected end: {expression}"
                        )
                    value.append(_operand(tokens[i + 1], expression, UPDATE))
                    i += 2
                if i < len(tokens) and tokens[i] in ("-", "("):
                    raise UnmodelledExpressionError(f"{tokens[i]!r} in {expression!r} is not modelled")
                actions.append(Action(clause, path, tuple(value)))
            if i < len(tokens) and tokens[i] == ",":
                i += 1
                continue
            break
    if not actions:
        raise ExpressionInvalidError("Invalid UpdateExpression: The expression can not be empty;")
    return tuple(actions)


# ------------------------------------------------------------------------------ binding


@dataclass(frozen=True)
class Bound:
    """A request's expressions with its placeholders checked: names resolved, values looked up."""

    condition: tuple[Term, ...]
    update: tuple[Action, ...]
    names: Mapping[str, str]
    values: Mapping[str, Any]

    def name(self, operand: Operand) -> str:
        return self.names[operand.text] if operand.text.startswith("#") else operand.text

    def value(self, operand: Operand, item: Item | None) -> Any:
        if operand.is_value:
            return self.values[operand.text]
        return None if item is None else item.get(self.name(operand))


def bind(
    condition: str | None,
    update: str | None,
    names: Mapping[str, str] | None,
    values: Mapping[str, Any] | None,
    key_attribute: str,
) -> Bound:
    """Parse and check a request's expressions against its names and values (DynamoDB's checks)."""
    if values is not None and not values:
        raise ExpressionInvalidError("ExpressionAttributeValues must not be empty")
    if names is not None and not names:
        raise ExpressionInvalidError("ExpressionAttributeNames must not be empty")
    if (values or names) and condition is None and update is None:
        raise ExpressionInvalidError(
            "ExpressionAttributeNames and ExpressionAttributeValues can only be specified when using expressions"
        )
    terms = parse_condition(condition) if condition is not None else ()
    actions = parse_update(update) if update is not None else ()
    operands = [o for t in terms for o in (t.left, t.right) if o is not None]
    operands += [o for a in actions for o in (a.path, *a.value)]
    used_names = {o.text for o in operands if o.text.startswith("#")}
    used_values = {o.text for o in operands if o.is_value}
    given_names, given_values = dict(names or {}), dict(values or {})
    for used in sorted(used_names - set(given_names)):
        raise ExpressionInvalidError(
            "Invalid expression: An expression attribute name used in the document path is not defined; "
            f"attribute name: {used}"
        )
    for used in sorted(used_values - set(given_values)):
        raise ExpressionInvalidError(
            "Invalid expression: An expression attribute value used in expression is not defined; "
            f"attribute value: {used}"
        )
    if set(given_names) - used_names:
        unused = ", ".join(sorted(set(given_names) - used_names))
        raise ExpressionInvalidError(
            f"Value provided in ExpressionAttributeNames unused in expressions: keys: {{{unused}}}"
        )
    if set(given_values) - used_values:
        unused = ", ".join(sorted(set(given_values) - used_values))
        raise ExpressionInvalidError(
            f"Value provided in ExpressionAttributeValues unused in expressions: keys: {{{unused}}}"
        )
    bound = Bound(terms, actions, given_names, given_values)
    targets = [bound.name(a.path) for a in actions]
    for index, target in enumerate(targets):
        if target == key_attribute:
            raise ExpressionInvalidError(
                f"One or more parameter values were invalid: Cannot update attribute {target}. "
                "This attribute is part of the key"
            )
        if target in targets[:index]:
            raise ExpressionInvalidError(
                "Invalid UpdateExpression: Two document paths overlap with each other; must remove or "
                f"rewrite one of these paths; path one: [{target}], path two: [{target}]"
            )
    return bound


# --------------------------------------------------------------------------- evaluation


def _number(value: Any) -> Decimal:
    try:
        return Decimal(value["N"])
    except (InvalidOperation, KeyError, TypeError) as exc:
        raise ExpressionInvalidError(f"not a number: {value}") from exc


def equal(a: Any, b: Any) -> bool:
    """DynamoDB's ``=``: both present, the same type, the same value (numbers by value, sets as sets)."""
    if a is None or b is None or a.keys() != b.keys():
        return False
    kind = next(iter(a))
    if kind == "N":
        return _number(a) == _number(b)
    if kind in ("SS", "NS", "BS"):
        return set(a[kind]) == set(b[kind])
    if kind in ("S", "BOOL", "NULL", "B"):
        return bool(a[kind] == b[kind])
    raise UnmodelledExpressionError(f"comparing values of type {kind} is not modelled")


def holds(bound: Bound, item: Item | None) -> bool:
    """Whether the condition holds on ``item`` (None: no item) -- true when there is no condition."""
    for term in bound.condition:
        if term.kind == "attribute_exists":
            ok = item is not None and bound.name(term.left) in item
        elif term.kind == "attribute_not_exists":
            ok = item is None or bound.name(term.left) not in item
        else:
            assert term.right is not None
            same = equal(bound.value(term.left, item), bound.value(term.right, item))
            ok = same if term.kind == "=" else not same
        if not ok:
            return False
    return True


def _number_text(number: Decimal) -> str:
    text = format(number.normalize(), "f")
    return text if text not in ("-0", "") else "0"


def apply(bound: Bound, item: Item) -> dict[str, Any]:
    """The item after the update (every right-hand side read from ``item`` as it was)."""
    result = dict(item)
    for action in bound.update:
        target = bound.name(action.path)
        if action.clause == "REMOVE":
            result.pop(target, None)
            continue
        operands = [bound.value(o, item) for o in action.value]
        if action.clause == "ADD":
            (value,) = operands
            current = item.get(target)
            if "N" not in value:
                raise UnmodelledExpressionError(f"ADD of {next(iter(value))} is not modelled (numbers only)")
            if current is not None and "N" not in current:
                raise ExpressionInvalidError(
                    "Invalid UpdateExpression: Incorrect operand type for operator or function; operator: ADD"
                )
            start = _number(current) if current is not None else Decimal(0)
            result[target] = {"N": _number_text(start + _number(value))}
        elif len(operands) == 1:
            if operands[0] is None:
                raise ExpressionInvalidError(
                    "The provided expression refers to an attribute that does not exist in the item"
                )
            result[target] = operands[0]
        else:
            if any(o is None for o in operands):
                raise ExpressionInvalidError(
                    "The provided expression refers to an attribute that does not exist in the item"
                )
            if any("N" not in o for o in operands):
                raise ExpressionInvalidError("An operand in the update expression has an incorrect data type")
            result[target] = {"N": _number_text(_number(operands[0]) + _number(operands[1]))}
    return result
