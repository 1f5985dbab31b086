"""Per-account values: what only the person deploying knows, so nothing ships them and nothing
guesses them.

An environment deployed to AWS needs its account, its region, the AMI of that region and, where
alarms must page someone, a topic or an address. Stand-in values (AWS's documentation account, a
made-up AMI, an ``example.com`` address) would pass every other check, so a deploy would go as far as
the AMI failing at instance launch, and prod's pages would go to example.com. So the synth of an
environment without them stops with one line naming every key to set and the section of
docs/deploy.md that says where each value comes from. Example values (the documentation's accounts
and AMIs, reserved e-mail domains) are refused like missing ones.

The emulator's environment (``endpoint_url``) is never deployed and needs none of this.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from ground.settings import Settings
from infra.errors import InfraConfigError

DOCS_SECTION = "docs/deploy.md#per-account-values"
# Environments where throw-away resources are fine (no deletion protection, emptied and removed with
# the stack) and whose alarms need not page anybody unless scaling.require_alarm_topic says so.
DISPOSABLE_ENVIRONMENTS = ("local", "dev")
# Accounts AWS's documentation uses in examples.
EXAMPLE_ACCOUNTS = frozenset({"123456789012", "111122223333", "444455556666", "777788889999"})
# AMI ids used as examples in AWS's documentation and CloudFormation/CDK samples.
EXAMPLE_AMIS = frozenset(
    {
        "ami-0123456789abcdef0",
        "ami-1234567890abcdef0",
        "ami-0abcdef1234567890",
        "ami-0ff8a91507f77f867",
        "ami-12345678",
        "ami-abcd1234",
    }
)
# Domains reserved for examples and tests (RFC 2606, RFC 6761): mail to them reaches nobody.
RESERVED_DOMAINS = ("example.com", "example.net", "example.org")
RESERVED_SUFFIXES = (".example", ".test", ".invalid", ".localhost")
_ARN_ACCOUNT = re.compile(r"^arn:[^:]+:[^:]+:[^:]*:(\d{12}):")


class PerAccountValueError(InfraConfigError):
    """A deployable environment lacks a per-account value, or carries an example one."""


def example_account(account: str) -> bool:
    return account in EXAMPLE_ACCOUNTS or len(set(account)) == 1


def example_ami(ami_id: str) -> bool:
    return ami_id in EXAMPLE_AMIS or len(set(ami_id.removeprefix("ami-"))) == 1


def example_address(address: str) -> bool:
    domain = address.rpartition("@")[2].lower().rstrip(".")
    return (
        not domain
        or domain in RESERVED_DOMAINS
        or domain.endswith(tuple(f".{d}" for d in RESERVED_DOMAINS))
        or domain.endswith(RESERVED_SUFFIXES)
        or domain in {s.lstrip(".") for s in RESERVED_SUFFIXES}
    )


def _arn_of_example_account(arn: str | None) -> bool:
    found = _ARN_ACCOUNT.match(arn or "")
    return found is not None and example_account(found.group(1))


def alarms_must_page(settings: Settings) -> bool:
    return settings.scaling.require_alarm_topic or settings.env not in DISPOSABLE_ENVIRONMENTS


def variable_for(key: str) -> str:
    """The ``CONSUMER_*`` variable that sets ``key`` (``fleet.ami_id``: ``CONSUMER_FLEET__AMI_ID``)."""
    return "CONSUMER_" + "__".join(part.upper() for part in key.split("."))


def per_account_problems(settings: Settings, environ: Mapping[str, str] | None = None) -> list[str]:
    """``"<key> <what is wrong>"`` for each per-account value a deployable environment lacks or
    carries as an example, naming the ``CONSUMER_*`` variable an example came from (it overrides the
    file, so the file is not where to fix it); empty for the emulator's environment."""
    if settings.endpoint_url is not None:
        return []
    environ = os.environ if environ is None else environ

    def example(key: str, value: object) -> str:
        variable = variable_for(key)
        where = f" (set by {variable})" if environ.get(variable) else ""
        return f"{key} {value} is an example{where}"

    problems: list[str] = []
    if settings.account is None:
        problems.append("account is missing")
    elif example_account(settings.account):
        problems.append(example("account", settings.account))
    if "region" not in settings.model_fields_set:
        problems.append("region is missing")
    ami_id = settings.fleet.ami_id
    if ami_id is None:
        problems.append("fleet.ami_id is missing")
    elif example_ami(ami_id):
        problems.append(example("fleet.ami_id", ami_id))
    scaling = settings.scaling
    if alarms_must_page(settings) and not scaling.has_alarm_topic:
        problems.append("scaling.alarm_topic_arn or scaling.alarm_topic_email is missing")
    if scaling.alarm_topic_email is not None and example_address(scaling.alarm_topic_email):
        problems.append(example("scaling.alarm_topic_email", scaling.alarm_topic_email))
    if _arn_of_example_account(scaling.alarm_topic_arn):
        problems.append(example("scaling.alarm_topic_arn", scaling.alarm_topic_arn))
    if _arn_of_example_account(settings.table.existing_stream_arn):
        problems.append(example("table.existing_stream_arn", settings.table.existing_stream_arn))
    return problems


def require_per_account_values(settings: Settings, environ: Mapping[str, str] | None = None) -> None:
    """Stop the synth with one line when :func:`per_account_problems` finds anything, saying where to
    fix each: the environment's file, or the variable that set it."""
    problems = per_account_problems(settings, environ)
    if not problems:
        return
    from_variables = [p for p in problems if "(set by CONSUMER_" in p]
    if len(from_variables) == len(problems):
        fix = "Change those variables (they override the files)"
    else:
        fix = f"Set them in config/{settings.env}.yaml (or as CONSUMER_* variables)"
        if from_variables:
            fix += "; a value set by a variable overrides the file: change the variable"
    raise PerAccountValueError(
        f"env {settings.env} cannot deploy: {'; '.join(problems)}. {fix}: {DOCS_SECTION}"
    )
