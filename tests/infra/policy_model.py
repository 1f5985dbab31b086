"""A resource policy evaluated as IAM documents it, for the statements the templates hold.

Explicit ``Deny`` wins; otherwise a matching ``Allow`` allows; otherwise the request is refused
("no resource-based policy allows"). A statement matches when its principal (``"*"``, ``AWS`` or
``Service``), action (case-insensitive, ``*`` wildcards), resource and every condition match. Condition
operators: ``StringEquals``, ``StringLike``, ``ArnEquals``, ``ArnLike``, ``Bool``; a key the request
does not carry never satisfies one of them. Anything else raises, so a statement this model cannot
read fails the test instead of being skipped.

Template values are resolved first (:func:`resolve`): ``Ref``/``Fn::GetAtt`` of the template's own
topics and keys become ARNs, ``AWS::Partition``/``AWS::AccountId``/``AWS::Region`` the given ones.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

ARN_SERVICES = {"AWS::SNS::Topic": "sns", "AWS::KMS::Key": "kms"}


@dataclass(frozen=True)
class Request:
    principal_service: str | None
    principal_arn: str | None
    action: str
    resource: str
    context: Mapping[str, str] = field(default_factory=dict)


def resolve(
    value: Any, template: Mapping[str, Any], account: str, region: str, partition: str = "aws"
) -> Any:
    """A template value with its intrinsic functions worked out (those the policies use)."""
    resources = template.get("Resources", {})

    def arn(logical: str) -> str:
        kind = resources[logical]["Type"]
        if kind == "AWS::SNS::Topic":
            name = resources[logical].get("Properties", {}).get("TopicName", logical)
            return f"arn:{partition}:sns:{region}:{account}:{name}"
        if kind == "AWS::KMS::Key":
            return f"arn:{partition}:kms:{region}:{account}:key/{logical}"
        raise NotImplementedError(f"ARN of a {kind}")

    if isinstance(value, list):
        return [resolve(v, template, account, region, partition) for v in value]
    if not isinstance(value, dict):
        return value
    if set(value) == {"Ref"}:
        name = value["Ref"]
        pseudo = {"AWS::Partition": partition, "AWS::AccountId": account, "AWS::Region": region}
        return pseudo[name] if name in pseudo else arn(name)
    if set(value) == {"Fn::GetAtt"}:
        logical, attribute = value["Fn::GetAtt"]
        if attribute != "Arn":
            raise NotImplementedError(f"Fn::GetAtt {attribute}")
        return arn(logical)
    if set(value) == {"Fn::Join"}:
        separator, parts = value["Fn::Join"]
        return separator.join(str(resolve(p, template, account, region, partition)) for p in parts)
    return {k: resolve(v, template, account, region, partition) for k, v in value.items()}


def _listed(value: Any) -> list[str]:
    return [str(v) for v in (value if isinstance(value, list) else [value])]


def _principal_matches(principal: Any, request: Request) -> bool:
    if principal == "*":
        return True
    if not isinstance(principal, Mapping):
        raise NotImplementedError(f"principal {principal!r}")
    if "Service" in principal and request.principal_service in _listed(principal["Service"]):
        return True
    if "AWS" in principal:
        allowed = _listed(principal["AWS"])
        return "*" in allowed or request.principal_arn in allowed
    return False


def _condition_matches(operator: str, key: str, expected: Any, context: Mapping[str, str]) -> bool:
    if key not in context:
        return False
    actual = context[key]
    values = _listed(expected)
    if operator in ("StringEquals", "ArnEquals"):
        return actual in values
    if operator in ("StringLike", "ArnLike"):
        return any(fnmatch.fnmatchcase(actual, pattern) for pattern in values)
    if operator == "Bool":
        return actual.lower() in [v.lower() for v in values]
    raise NotImplementedError(f"condition operator {operator}")


def _statement_matches(statement: Mapping[str, Any], request: Request) -> bool:
    if "NotAction" in statement or "NotResource" in statement or "NotPrincipal" in statement:
        raise NotImplementedError("Not* elements")
    if not _principal_matches(statement.get("Principal"), request):
        return False
    if not any(fnmatch.fnmatch(request.action.lower(), a.lower()) for a in _listed(statement["Action"])):
        return False
    if not any(fnmatch.fnmatchcase(request.resource, r) for r in _listed(statement["Resource"])):
        return False
    for operator, keys in statement.get("Condition", {}).items():
        for key, expected in keys.items():
            if not _condition_matches(operator, key, expected, request.context):
                return False
    return True


def decide(policy: Mapping[str, Any], request: Request) -> str:
    """``"allowed"``, ``"denied"`` (an explicit Deny) or ``"no allow"`` (nothing allows it)."""
    statements = policy["Statement"]
    statements = statements if isinstance(statements, list) else [statements]
    matching = [s for s in statements if _statement_matches(s, request)]
    if any(s["Effect"] == "Deny" for s in matching):
        return "denied"
    if any(s["Effect"] == "Allow" for s in matching):
        return "allowed"
    return "no allow"
