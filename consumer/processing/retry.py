"""How long to wait before the next attempt, and which errors are not worth another one.

Back-off is exponential with full jitter (the spread keeps a fleet of stuck shards from retrying
in lock-step against a recovering downstream). Non-retryable exception classes are resolved from
their import paths at start-up, so a typo fails the worker before it takes a lease.
"""

from __future__ import annotations

import importlib
import random
from dataclasses import dataclass, field

from consumer.processing.errors import NonRetryableError, ProcessingConfigError
from ground.settings import RetrySettings


def resolve_exception_class(path: str) -> type[BaseException]:
    """``package.module.ClassName`` or ``package.module:ClassName`` → the class, or a clear error."""
    module_name, sep, name = path.partition(":")
    if not sep:
        module_name, _, name = path.rpartition(".")
    if not module_name or not name:
        raise ProcessingConfigError(
            f"processing.retry.non_retryable_exceptions: {path!r} is not 'package.module.ClassName'"
        )
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise ProcessingConfigError(
            f"processing.retry.non_retryable_exceptions: {path!r}: module {module_name} does not import: {exc!r}"
        ) from exc
    found = getattr(module, name, None)
    if not (isinstance(found, type) and issubclass(found, BaseException)):
        raise ProcessingConfigError(
            f"processing.retry.non_retryable_exceptions: {path!r}: {module_name} has no exception class {name}"
        )
    return found


# The settings' defaults are the policy's (a processor wired by hand gets what an unset
# processing.retry gives): one value per setting.
_DEFAULTS = RetrySettings()


@dataclass(frozen=True)
class RetryPolicy:
    max_retry_attempts: int = _DEFAULTS.max_retry_attempts  # -1: until an operator acts
    max_record_age_seconds: int = _DEFAULTS.max_record_age_seconds  # -1: no limit
    base_backoff_millis: int = _DEFAULTS.base_backoff_millis
    max_backoff_millis: int = _DEFAULTS.max_backoff_millis
    bisect_on_error: bool = _DEFAULTS.bisect_on_error
    non_retryable: tuple[type[BaseException], ...] = (NonRetryableError,)
    rng: random.Random = field(default_factory=random.Random, compare=False)

    @classmethod
    def from_settings(cls, settings: RetrySettings, rng: random.Random | None = None) -> RetryPolicy:
        classes = tuple(resolve_exception_class(p) for p in settings.non_retryable_exceptions)
        return cls(
            max_retry_attempts=settings.max_retry_attempts,
            max_record_age_seconds=settings.max_record_age_seconds,
            base_backoff_millis=settings.base_backoff_millis,
            max_backoff_millis=max(settings.max_backoff_millis, settings.base_backoff_millis),
            bisect_on_error=settings.bisect_on_error,
            non_retryable=(NonRetryableError, *classes),
            rng=rng or random.Random(),
        )

    def is_retryable(self, error: BaseException) -> bool:
        return not isinstance(error, self.non_retryable)

    def exhausted(self, attempts: int) -> bool:
        """``attempts`` failed tries so far: is that the last one allowed?"""
        return self.max_retry_attempts >= 0 and attempts > self.max_retry_attempts

    def too_old(self, approximate_creation_seconds: float, now_millis: int) -> bool:
        if self.max_record_age_seconds < 0 or approximate_creation_seconds <= 0:
            return False
        return now_millis - approximate_creation_seconds * 1000 > self.max_record_age_seconds * 1000

    def backoff_millis(self, attempts: int) -> int:
        """Full jitter in [base, min(max, base * 2^(attempts-1))]."""
        ceiling = min(self.max_backoff_millis, self.base_backoff_millis * 2 ** min(max(attempts - 1, 0), 30))
        return int(self.rng.uniform(self.base_backoff_millis, max(ceiling, self.base_backoff_millis)))
