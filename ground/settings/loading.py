"""Reading config/*.yaml: ``base.yaml`` + ``<env>.yaml`` + ``CONSUMER_*`` variables, merged with a
record of which source set each key, then validated by the root model.

Generic over the root model (``ground.settings`` passes :class:`~ground.settings.Settings`), so
that this module needs no import of the root and the root's module stays about the models. Every
error names the file or variable the offending value came from (see :func:`describe`).
"""

from __future__ import annotations

import difflib
import os
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from ground.settings.base import ConfigError, Problem, RenamedKeyWarning, describe

ENV_PREFIX = "CONSUMER_"
CONFIG_DIR_VARIABLE = "CONSUMER_CONFIG_DIR"
DEFAULT_CONFIG_DIR = Path("config")
ENVIRONMENTS = ("local", "dev", "prod")

RootModel = TypeVar("RootModel", bound=BaseModel)


def config_dir(explicit: str | Path | None = None, environ: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    if explicit is not None:
        return Path(explicit)
    if environ.get(CONFIG_DIR_VARIABLE):
        return Path(environ[CONFIG_DIR_VARIABLE])
    return DEFAULT_CONFIG_DIR


def available_environments(directory: Path) -> list[str]:
    return sorted(p.stem for p in directory.glob("*.yaml") if p.stem != "base")


class DuplicateKeyError(yaml.YAMLError):
    """A mapping names a key twice: YAML says keys are unique, and PyYAML would keep the later value
    without a word, so a setting edited in one place could be silently overridden in another."""

    def __init__(self, key: str, first: yaml.Mark, second: yaml.Mark) -> None:
        super().__init__(f"key {key!r} written twice")
        self.key, self.first, self.second = key, first, second


class _UniqueKeyLoader(yaml.SafeLoader):
    """The safe loader, refusing a key written twice in one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Mark] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, str | int | float | bool) and key in seen:
                raise DuplicateKeyError(str(key), seen[key], key_node.start_mark)
            if isinstance(key, str | int | float | bool):
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)  # a SafeLoader
    except DuplicateKeyError as exc:
        first = f"line {exc.first.line + 1}, column {exc.first.column + 1}"
        message = (
            f"key {exc.key!r} is written twice (first at {first}); YAML keys are unique and the later "
            "value would silently win: keep one"
        )
        raise ConfigError(
            [Problem(str(path), "", message, line=exc.second.line + 1, column=exc.second.column + 1)]
        ) from exc
    except yaml.YAMLError as exc:
        raise ConfigError([_syntax_problem(path, exc)]) from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError([Problem(str(path), "(top level)", "must be a mapping of settings")])
    return data


def _syntax_problem(path: Path, exc: yaml.YAMLError) -> Problem:
    """A YAML syntax error as one line at ``file:line:column`` (PyYAML's own message spans five)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    message = f"not valid YAML: {problem}" + (f" ({context})" if context else "")
    if mark is None:
        return Problem(str(path), "", message)
    return Problem(str(path), "", message, line=mark.line + 1, column=mark.column + 1)


def key_position(path: Path, key_path: str) -> tuple[int, int] | None:
    """Line and column (1-based) of ``key_path`` (``worker.max_records``) in the YAML file, or of
    the deepest part of it the file has; None when the file does not hold its first part."""
    try:
        node = yaml.compose(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None
    found: tuple[int, int] | None = None
    for part in key_path.split("."):
        if not isinstance(node, yaml.MappingNode):
            break
        match = next((item for item in node.value if item[0].value == part), None)
        if match is None:
            break
        found = (match[0].start_mark.line + 1, match[0].start_mark.column + 1)
        node = match[1]
    return found


def _located(problem: Problem) -> Problem:
    """The problem with the line and column of its key, where its source is a YAML file."""
    source = Path(problem.source)
    if problem.line is not None or source.suffix != ".yaml" or not source.is_file():
        return problem
    position = key_position(source, problem.path)
    if position is None:
        return problem
    return Problem(problem.source, problem.path, problem.message, line=position[0], column=position[1])


def _merge(
    target: dict[str, Any], overlay: Mapping[str, Any], source: str, origins: dict[str, str], prefix: str = ""
) -> None:
    """Deep-merge ``overlay`` into ``target``, recording which source set each leaf.

    An empty mapping replaces what was there: it is the only way to say "none of these" (for
    example ``CONSUMER_PROCESSING__OPTIONS='{}'``), and merging nothing into something would
    silently keep the lower layer's keys.
    """
    for key, value in overlay.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and not value:
            target[key] = {}
            for stale in [leaf for leaf in origins if leaf.startswith(f"{path}.")]:
                del origins[stale]
            origins[path] = source
        elif isinstance(value, Mapping) and isinstance(target.get(key), dict):
            _merge(target[key], value, source, origins, f"{path}.")
        else:
            target[key] = dict(value) if isinstance(value, Mapping) else value
            origins[path] = source
            if isinstance(value, Mapping):
                for leaf in _leaf_paths(value, f"{path}."):
                    origins[leaf] = source


def _leaf_paths(mapping: Mapping[str, Any], prefix: str) -> Iterator[str]:
    for key, value in mapping.items():
        if isinstance(value, Mapping):
            yield from _leaf_paths(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}"


def _environment_overrides(environ: Mapping[str, str]) -> list[tuple[str, dict[str, Any]]]:
    overrides: list[tuple[str, dict[str, Any]]] = []
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX) or name == CONFIG_DIR_VARIABLE:
            continue
        parts = [p.lower() for p in name[len(ENV_PREFIX) :].split("__") if p]
        if not parts:
            continue
        value: Any = yaml.safe_load(environ[name]) if environ[name] else ""
        nested: dict[str, Any] = {parts[-1]: value}
        for part in reversed(parts[:-1]):
            nested = {part: nested}
        overrides.append((f"environment variable {name}", nested))
    return overrides


def _forget_options_of_another_processor(
    merged: dict[str, Any], overlay: Mapping[str, Any], origins: dict[str, str]
) -> str | None:
    """Options belong to the processor they were written for.

    When ``overlay`` names a different ``processing.processor`` than the layers below it, the
    options those layers gave (for the processor they named) are dropped before ``overlay`` is
    merged, so ``CONSUMER_PROCESSING__PROCESSOR=mine:handle`` over ``config/local.yaml`` does not
    hand ``mine:handle`` the changelog sink's ``destination``. Returns the processor whose options
    were dropped, if any, so the caller can say so.
    """
    processing = overlay.get("processing")
    below = merged.get("processing")
    if not isinstance(processing, Mapping) or not isinstance(below, dict):
        return None
    if "processor" not in processing or processing["processor"] == below.get("processor"):
        return None
    if not below.get("options"):
        return None
    below.pop("options")
    for stale in [leaf for leaf in origins if leaf.startswith("processing.options")]:
        del origins[stale]
    return str(below.get("processor", "changelog"))


def _source_of(path: str, origins: Mapping[str, str], ranks: Mapping[str, int], fallback: str) -> str:
    """The file or variable that set ``path``; for a whole-section check, the highest-precedence
    source that set anything inside that section (that is the edit that broke it)."""
    below = [src for key, src in origins.items() if key.startswith(f"{path}.")]
    if below:
        return max(below, key=lambda src: ranks.get(src, -1))
    probe = path
    while probe:
        if probe in origins:
            return origins[probe]
        probe = probe.rpartition(".")[0]
    return fallback


def load_layers(
    root: type[RootModel],
    env: str,
    directory: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[RootModel, list[str]]:
    """Validate ``base.yaml`` + ``<env>.yaml`` + environment overrides as ``root``, or raise
    :class:`ConfigError`; with the notices (renamed keys, each naming the file or variable that
    used the old name) that do not make the configuration invalid."""
    environ = os.environ if environ is None else environ
    folder = config_dir(directory, environ)
    env_file = folder / f"{env}.yaml"
    if not env_file.is_file():
        known = available_environments(folder) if folder.is_dir() else []
        close = difflib.get_close_matches(env, known, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        listing = ", ".join(known) or "none"
        raise ConfigError(
            [Problem(str(env_file), "(file)", f"no such environment file{hint} (environments: {listing})")]
        )
    merged: dict[str, Any] = {}
    origins: dict[str, str] = {}
    layers: list[tuple[str, Mapping[str, Any]]] = []
    base = folder / "base.yaml"
    if base.is_file():
        layers.append((str(base), _read_yaml(base)))
    layers.append((str(env_file), _read_yaml(env_file)))
    files = len(layers)
    layers.extend(_environment_overrides(environ))
    for source, overlay in layers[:files]:
        _forget_options_of_another_processor(merged, overlay, origins)
        _merge(merged, overlay, source, origins)
    # The variables are one layer as far as options go: CONSUMER_PROCESSING__OPTIONS__X sorts before
    # CONSUMER_PROCESSING__PROCESSOR, and must still count as an option of the processor it names.
    variables: dict[str, Any] = {}
    for _, overlay in layers[files:]:
        _merge(variables, overlay, "", {})
    _forget_options_of_another_processor(merged, variables, origins)
    for source, overlay in layers[files:]:
        _merge(merged, overlay, source, origins)
    merged["env"] = env
    ranks = {source: rank for rank, (source, _) in enumerate(layers)}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RenamedKeyWarning)
        try:
            settings = root.model_validate(merged)
        except ValidationError as exc:
            problems = []
            for error in exc.errors():
                path, message = describe(error, root)
                problems.append(
                    _located(Problem(_source_of(path, origins, ranks, str(env_file)), path, message))
                )
            raise ConfigError(problems) from None
    notices: list[str] = []
    for caught_warning in caught:
        found = caught_warning.message
        if isinstance(found, RenamedKeyWarning):
            # Said again with the file or variable that used the old name, as errors are.
            source = _source_of(found.old_path, origins, ranks, str(env_file))
            notice = f"{source}: {found}"
            notices.append(notice)
            warnings.warn(RenamedKeyWarning(notice, found.old_path, found.new_path), stacklevel=3)
        else:  # anything else pydantic or a validator said goes on as it was
            warnings.warn_explicit(
                found, caught_warning.category, caught_warning.filename, caught_warning.lineno
            )
    return settings, notices


def loaded_sources(
    env: str, directory: str | Path | None = None, environ: Mapping[str, str] | None = None
) -> list[str]:
    """The files and variables :func:`~ground.settings.load_settings` reads for ``env``, lowest precedence first
    (what a command prints first, so nobody has to guess which configuration it used)."""
    environ = os.environ if environ is None else environ
    folder = config_dir(directory, environ)
    sources = [str(folder / "base.yaml")] if (folder / "base.yaml").is_file() else []
    sources.append(str(folder / f"{env}.yaml"))
    sources.extend(
        name for name in sorted(environ) if name.startswith(ENV_PREFIX) and name != CONFIG_DIR_VARIABLE
    )
    return sources
