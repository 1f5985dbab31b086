"""CDK stacks per environment: tables, fleet, logs, dashboard, alarms (see docs/deploy.md).

The dashboard's widgets are one list in ``tools/dashboard/widgets.py`` (the local dashboard
draws it too); ``infra.widgets`` resolves it into CloudWatch terms for one environment.
"""
