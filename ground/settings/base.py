"""What every settings model shares: the strict base, the error a loader raises, how a pydantic
error becomes a line that names the key, and how a renamed key keeps working for one release.

Kept apart from the models so that each part's module (worker, processing, fleet...) imports only
this, and the loader can format errors for any root model without importing the root itself.
"""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict


class SettingsModel(BaseModel):
    """Strict base: unknown keys are errors (with a suggestion), models are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


# ------------------------------------------------------------------------------------------ errors


@dataclass(frozen=True)
class Problem:
    """One thing wrong, where it is: ``file[:line:column]: key.path: what to do``, one line."""

    source: str
    path: str
    message: str
    line: int | None = None  # 1-based, where the source is a file and the place is known
    column: int | None = None

    def __str__(self) -> str:
        where = self.source if self.line is None else f"{self.source}:{self.line}:{self.column or 1}"
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class ConfigError(Exception):
    """A configuration that cannot be used; ``problems`` says where and why."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


def model_at(root: type[BaseModel], path: tuple[str | int, ...]) -> type[BaseModel] | None:
    """The pydantic model that owns the key at ``path`` (for suggesting the nearest key)."""
    model: type[BaseModel] = root
    for part in path[:-1]:
        if isinstance(part, int):
            continue  # an entry of a list (streams.0.table): the list's item model is already found
        if part not in model.model_fields:
            return None
        annotation = model.model_fields[part].annotation
        candidates = [annotation]
        for candidate in candidates:  # Optional[tuple[Model, ...]]: the model is two levels down
            candidates.extend(getattr(candidate, "__args__", ()))
        nested = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
        if nested is None:
            return None
        model = nested
    return model


def describe(error: Mapping[str, Any], root: type[BaseModel]) -> tuple[str, str]:
    """(key path, message) of one pydantic error, in the words a person editing YAML needs."""
    loc: tuple[str | int, ...] = tuple(error["loc"])
    # Validators that run on a whole model add no key of their own; drop pydantic's helper segments.
    loc = tuple(p for p in loc if not (isinstance(p, str) and p.startswith(("function-", "literal["))))
    path = ".".join(str(p) for p in loc) or "(top level)"
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        model = model_at(root, loc)
        allowed = sorted(model.model_fields) if model else []
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1, cutoff=0.6)
        section = ".".join(str(p) for p in loc[:-1]) or "the top level"
        # One short line: the nearest key when there is one, else where the keys are listed (a
        # section can have 30 of them, which is no line to read).
        message = (
            f"unknown key; did you mean '{close[0]}'?"
            if close
            else f"unknown key (not one of the {len(allowed)} keys of {section}: docs/settings.md lists them)"
        )
    elif error["type"] == "missing":
        message = "required key is missing"
    elif (
        "input" in error
        and error["type"] not in ("model_type",)
        and loc
        and not isinstance(error["input"], Mapping)
    ):
        # (A whole-section check's input is the whole section: its message names the keys.)
        message = f"{message} (got {error['input']!r})"
    return path, message


# ------------------------------------------------------------------------------------ renamed keys


class RenamedKeyWarning(DeprecationWarning):
    """A key given under its old name. The loader re-issues it with the file or variable that
    used the old name, and lists it among :meth:`Settings.warnings`, so an operator sees it in
    ``consumer config validate`` and ``consumer plan`` (Python hides DeprecationWarning by default)."""

    def __init__(self, message: str, old_path: str, new_path: str) -> None:
        super().__init__(message)
        self.old_path = old_path
        self.new_path = new_path


def take_renamed_keys(data: Any, section: str, renamed: Mapping[str, str]) -> Any:
    """``data`` with each old key of ``renamed`` (old -> new) moved to its new name.

    For a ``mode="before"`` model validator: the old name keeps working for one release, with a
    :class:`RenamedKeyWarning` naming the new key; giving both names is an error, because which of
    two different values was meant cannot be guessed. ``section`` is the model's key path
    (``processing.batching``), so that messages name keys as they are written in config/*.yaml.
    """
    if not isinstance(data, Mapping):
        return data
    found = [old for old in renamed if old in data]
    if not found:
        return data
    moved = dict(data)
    for old in found:
        new = renamed[old]
        if new in moved:
            raise ValueError(
                f"{section}.{old} and {section}.{new} are both set: {old} is the old name of {new}, "
                f"keep only {new}"
            )
        moved[new] = moved.pop(old)
        warnings.warn(
            RenamedKeyWarning(
                f"{section}.{old} is deprecated: rename it {section}.{new} (same meaning); the old "
                "name is still read in this release only",
                f"{section}.{old}",
                f"{section}.{new}",
            ),
            stacklevel=2,
        )
    return moved
