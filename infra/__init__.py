"""CDK stacks per environment: tables, fleet, logs, dashboard, alarms (see docs/deploy.md).

``infra.widgets`` is plain data and imports no CDK, so the local dashboard can use it.
"""
