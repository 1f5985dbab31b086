"""CloudWatch as far as the alarms of the synthesized templates need it, evaluated over given datapoints.

An alarm's resource properties go in as CloudFormation has them (``MetricName``/``Statistic`` or a
``Metrics`` array of ``MetricStat`` and ``Expression`` entries); the datapoints are what publishers
sent (the workers' EMF series, AWS's own DynamoDB and Auto Scaling metrics). Implemented, with
CloudWatch's documented semantics:

* statistics per period (Sum, Average, Maximum, Minimum, SampleCount);
* metric math: ``+ - * /``, comparisons, ``AND``/``OR``/``NOT``, ``IF(c, a, b)``,
  ``FILL(x, value | REPEAT)``; a datapoint missing in an operand is missing in the result, and so is
  a division by zero;
* the Metrics Insights form the alarms use: ``SELECT FUNC(name) FROM SCHEMA("ns", k1, k2) WHERE k = 'v'``
  over every series with exactly those dimension keys, optionally ``GROUP BY`` some of the keys;
* the state over the last ``EvaluationPeriods`` periods (``DatapointsToAlarm`` of them breaching), a
  missing datapoint counted as ``TreatMissingData`` says;
* a query with ``GROUP BY`` is a multi-time-series alarm: each group with data in the window is a
  contributor, judged alone and only ever ALARM or OK (a series exists only while it has data); the
  alarm is in ALARM while any contributor is (:func:`alarm_contributors`), and each contributor
  entering ALARM is notified, named (CloudWatch's contributor-level SNS notifications).

tests/infra evaluates the alarms over a healthy fleet's metrics with it, and the fleet model
(simulation/fleet_ops) every minute of a history. It is a model, so tests/infra also checks that it
refuses what it does not know (an unknown function or statistic raises) rather than evaluating it
wrongly.
"""

from __future__ import annotations

import functools
import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Series = list[float | None]
Key = tuple[str, str, frozenset[tuple[str, str]]]


@dataclass
class Datapoints:
    """Raw datapoints by (namespace, metric, dimensions), each a list of (second, value)."""

    points: dict[Key, list[tuple[float, float]]] = field(default_factory=lambda: defaultdict(list))

    def extend(
        self, namespace: str, name: str, dimensions: Mapping[str, str], points: Iterable[tuple[float, float]]
    ) -> None:
        self.points[(namespace, name, frozenset(dimensions.items()))].extend(points)

    def series(self, key: Key) -> list[tuple[float, float]]:
        return self.points.get(key, [])


STATISTICS: dict[str, Callable[[list[float]], float]] = {
    "Sum": sum,
    "Average": lambda v: sum(v) / len(v),
    "Maximum": max,
    "Minimum": min,
    "SampleCount": lambda v: float(len(v)),
}
INSIGHTS_FUNCTIONS = {
    "MAX": "Maximum",
    "MIN": "Minimum",
    "SUM": "Sum",
    "AVG": "Average",
    "COUNT": "SampleCount",
}


def _buckets(
    points: Iterable[tuple[float, float]], start: float, period: int, count: int
) -> list[list[float]]:
    buckets: list[list[float]] = [[] for _ in range(count)]
    for at, value in points:
        index = int((at - start) // period)
        if 0 <= index < count:
            buckets[index].append(value)
    return buckets


def statistic_series(
    points: Iterable[tuple[float, float]], stat: str, start: float, period: int, count: int
) -> Series:
    if stat not in STATISTICS:
        raise NotImplementedError(f"statistic {stat}")
    return [STATISTICS[stat](b) if b else None for b in _buckets(points, start, period, count)]


_INSIGHTS = re.compile(
    r"^SELECT (\w+)\((\w+)\) FROM SCHEMA\(\"([^\"]+)\", ([\w, ]+)\) WHERE (\w+) = '([^']*)'"
    r"(?: GROUP BY ([\w, ]+?))?$"
)


def _keys(text: str) -> list[str]:
    return [k.strip() for k in text.split(",")]


def is_grouped(alarm: Mapping[str, Any]) -> bool:
    """Whether the alarm's query is a Metrics Insights query with GROUP BY (a multi-time-series alarm)."""
    for query in alarm.get("Metrics", ()):
        match = _INSIGHTS.match(str(query.get("Expression", "")).strip())
        if match is not None and match.group(7):
            return True
    return False


def insights_groups(
    query: str, data: Datapoints, start: float, period: int, count: int
) -> dict[tuple[tuple[str, str], ...], Series]:
    """The query's series by group (the GROUP BY keys' values; one group ``()`` without GROUP BY)."""
    match = _INSIGHTS.match(query.strip())
    if match is None:
        raise NotImplementedError(f"Metrics Insights query {query!r}")
    function, name, namespace, keys, where_key, where_value, group_by = match.groups()
    wanted = set(_keys(keys))
    grouping = _keys(group_by) if group_by else []
    if not set(grouping) <= wanted:
        raise NotImplementedError(f"GROUP BY keys outside the schema in {query!r}")
    pooled: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = defaultdict(list)
    for (ns, metric, dims), points in data.points.items():
        values = dict(dims)
        if (
            ns == namespace
            and metric == name
            and set(values) == wanted
            and values.get(where_key) == where_value
        ):
            pooled[tuple((k, values[k]) for k in grouping)].extend(points)
    stat = INSIGHTS_FUNCTIONS[function]
    groups = {group: statistic_series(points, stat, start, period, count) for group, points in pooled.items()}
    return groups if grouping else {(): groups.get((), [None] * count)}


def insights_series(query: str, data: Datapoints, start: float, period: int, count: int) -> Series:
    groups = insights_groups(query, data, start, period, count)
    if () not in groups:
        raise NotImplementedError(f"a query with GROUP BY is judged per contributor: {query!r}")
    return groups[()]


# ------------------------------------------------------------------------------------ metric math

_TOKEN = re.compile(r"\s*(?:(\d+(?:\.\d+)?(?:e[+-]?\d+)?)|([A-Za-z_]\w*)|(<=|>=|==|!=|&&|\|\||[-+*/(),<>!]))")


@functools.cache
def _tokens(text: str) -> tuple[str, ...]:
    """The expression's tokens (cached: the fleet model evaluates one alarm every minute)."""
    found: list[str] = []
    position = 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            if text[position:].strip() == "":
                break
            raise NotImplementedError(f"cannot read {text[position:]!r} in {text!r}")
        found.append(match.group(match.lastindex or 0))
        position = match.end()
    return tuple(found)


def _elementwise(a: Series, b: Series, op: Callable[[float, float], float | None]) -> Series:
    return [None if x is None or y is None else op(x, y) for x, y in zip(a, b, strict=True)]


def _divide(x: float, y: float) -> float | None:
    return None if y == 0 else x / y


_BINARY: dict[str, Callable[[float, float], float | None]] = {
    "+": lambda x, y: x + y,
    "-": lambda x, y: x - y,
    "*": lambda x, y: x * y,
    "/": _divide,
    "<": lambda x, y: float(x < y),
    "<=": lambda x, y: float(x <= y),
    ">": lambda x, y: float(x > y),
    ">=": lambda x, y: float(x >= y),
    "==": lambda x, y: float(x == y),
    "!=": lambda x, y: float(x != y),
    "AND": lambda x, y: float(bool(x) and bool(y)),
    "OR": lambda x, y: float(bool(x) or bool(y)),
}


class _Parser:
    def __init__(self, text: str, variables: Mapping[str, Series], count: int) -> None:
        self.tokens = _tokens(text)
        self.at = 0
        self.variables = variables
        self.count = count

    def peek(self) -> str | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None or (expected is not None and token.upper() != expected):
            raise NotImplementedError(f"expected {expected!r}, found {token!r} in {' '.join(self.tokens)}")
        self.at += 1
        return token

    def parse(self) -> Series:
        value = self.logical()
        if self.peek() is not None:
            raise NotImplementedError(f"unexpected {self.peek()!r}")
        return value

    def _left_assoc(self, operators: set[str], operand: Callable[[], Series]) -> Series:
        value = operand()
        while (token := self.peek()) is not None and token.upper() in operators:
            op = {"&&": "AND", "||": "OR"}.get(self.take(), token.upper())
            value = _elementwise(value, operand(), _BINARY[op])
        return value

    def logical(self) -> Series:
        return self._left_assoc({"OR", "||"}, lambda: self._left_assoc({"AND", "&&"}, self.negation))

    def negation(self) -> Series:
        if (self.peek() or "").upper() in ("NOT", "!"):
            self.take()
            return [None if v is None else float(not v) for v in self.negation()]
        return self.comparison()

    def comparison(self) -> Series:
        value = self.additive()
        if self.peek() in ("<", "<=", ">", ">=", "==", "!="):
            op = self.take()
            value = _elementwise(value, self.additive(), _BINARY[op])
        return value

    def additive(self) -> Series:
        return self._left_assoc({"+", "-"}, self.multiplicative)

    def multiplicative(self) -> Series:
        return self._left_assoc({"*", "/"}, self.unary)

    def unary(self) -> Series:
        if self.peek() == "-":
            self.take()
            return [None if v is None else -v for v in self.unary()]
        return self.atom()

    def atom(self) -> Series:
        token = self.take()
        if token == "(":
            value = self.logical()
            self.take(")")
            return value
        if re.fullmatch(r"\d+(?:\.\d+)?(?:e[+-]?\d+)?", token):
            return [float(token)] * self.count
        if self.peek() == "(":
            return self.call(token.upper())
        if token not in self.variables:
            raise NotImplementedError(f"unknown metric id {token!r}")
        return list(self.variables[token])

    def call(self, function: str) -> Series:
        self.take("(")
        if function == "IF":
            condition = self.logical()
            self.take(",")
            then = self.logical()
            self.take(",")
            otherwise = self.logical()
            self.take(")")
            return [
                None if c is None else (t if c else o)
                for c, t, o in zip(condition, then, otherwise, strict=True)
            ]
        if function == "FILL":
            value = self.logical()
            self.take(",")
            if (self.peek() or "").upper() == "REPEAT":
                self.take()
                self.take(")")
                filled: Series = []
                last: float | None = None
                for v in value:
                    last = v if v is not None else last
                    filled.append(last)
                return filled
            constant = self.logical()
            self.take(")")
            return [c if v is None else v for v, c in zip(value, constant, strict=True)]
        raise NotImplementedError(f"metric math function {function}")


def evaluate_expression(text: str, variables: Mapping[str, Series], count: int) -> Series:
    return _Parser(text, variables, count).parse()


# ------------------------------------------------------------------------------------------ alarms

_COMPARE: dict[str, Callable[[float, float], bool]] = {
    "GreaterThanOrEqualToThreshold": lambda v, t: v >= t,
    "GreaterThanThreshold": lambda v, t: v > t,
    "LessThanThreshold": lambda v, t: v < t,
    "LessThanOrEqualToThreshold": lambda v, t: v <= t,
}


def dimension_value(value: str | Mapping[str, str]) -> str:
    """A dimension's value; a reference to a resource (``{"Ref": id}``: a generated name) as ``<id>``."""
    return value if isinstance(value, str) else f"<{value['Ref']}>"


def _dimensions(raw: Sequence[Mapping[str, Any]] | None) -> frozenset[tuple[str, str]]:
    return frozenset((d["Name"], dimension_value(d["Value"])) for d in raw or ())


def alarm_series(alarm: Mapping[str, Any], data: Datapoints, start: float, end: float) -> tuple[Series, int]:
    """The series the alarm compares with its threshold, over whole periods from ``start`` to ``end``."""
    if "Metrics" not in alarm:
        period = int(alarm["Period"])
        count = int((end - start) // period)
        key = (alarm["Namespace"], alarm["MetricName"], _dimensions(alarm.get("Dimensions")))
        return statistic_series(data.series(key), alarm["Statistic"], start, period, count), period
    queries = alarm["Metrics"]
    periods = {int(q["MetricStat"]["Period"]) for q in queries if "MetricStat" in q}
    periods |= {int(q["Period"]) for q in queries if "Period" in q}
    if len(periods) != 1:
        raise NotImplementedError(f"an alarm whose queries have periods {periods}")
    period = periods.pop()
    count = int((end - start) // period)
    variables: dict[str, Series] = {}
    for query in queries:
        if "MetricStat" in query:
            stat = query["MetricStat"]
            metric = stat["Metric"]
            key = (metric["Namespace"], metric["MetricName"], _dimensions(metric.get("Dimensions")))
            variables[query["Id"]] = statistic_series(data.series(key), stat["Stat"], start, period, count)
    (returned,) = [q for q in queries if q.get("ReturnData", True)]
    expression = returned["Expression"]
    if expression.lstrip().upper().startswith("SELECT"):
        return insights_series(expression, data, start, period, count), period
    return evaluate_expression(expression, variables, count), period


def alarm_contributors(
    alarm: Mapping[str, Any], data: Datapoints, start: float, end: float
) -> dict[str, str]:
    """A multi-time-series alarm's contributors at ``end`` (``k=v,...`` of the GROUP BY keys) and
    each one's state, ALARM or OK; a group without data in the window is no contributor."""
    (returned,) = [q for q in alarm["Metrics"] if q.get("ReturnData", True)]
    period = int(returned["Period"])
    count = int((end - start) // period)
    periods = int(alarm["EvaluationPeriods"])
    found: dict[str, str] = {}
    for group, series in insights_groups(returned["Expression"], data, start, period, count).items():
        if all(v is None for v in series[-periods:]):
            continue
        state = _state_of(alarm, series, missing="notBreaching")
        found[",".join(f"{k}={v}" for k, v in group)] = state
    return found


def alarm_state(alarm: Mapping[str, Any], data: Datapoints, start: float, end: float) -> str:
    """OK, ALARM or INSUFFICIENT_DATA at ``end`` (a multi-time-series alarm: ALARM while any
    contributor is, OK while it has contributors, else as its missing data says)."""
    if is_grouped(alarm):
        contributors = alarm_contributors(alarm, data, start, end)
        if contributors:
            return "ALARM" if "ALARM" in contributors.values() else "OK"
        periods = int(alarm["EvaluationPeriods"])
        return _state_of(alarm, [None] * periods)
    series, _ = alarm_series(alarm, data, start, end)
    return _state_of(alarm, series)


def _state_of(alarm: Mapping[str, Any], series: Series, missing: str | None = None) -> str:
    periods = int(alarm["EvaluationPeriods"])
    needed = int(alarm.get("DatapointsToAlarm", periods))
    window = series[-periods:]
    compare = _COMPARE[alarm["ComparisonOperator"]]
    threshold = float(alarm["Threshold"])
    missing = missing or alarm.get("TreatMissingData", "missing")
    breaching = 0
    present = 0
    for value in window:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            if missing == "breaching":
                breaching += 1
            continue
        present += 1
        breaching += int(compare(value, threshold))
    if breaching >= needed:
        return "ALARM"
    if present == 0 and missing in ("missing", "ignore"):
        return "INSUFFICIENT_DATA"
    return "OK"
