"""The window-state table: tumbling windows' state, saved with every checkpoint.

Only deployed when ``processing.tumbling_window_seconds`` > 0. Items are
``{shard: "<application>#<shard id>", sequence: <40-digit sequence number>, windowStart, closed,
state}`` (consumer/processing/windows.py), at most a few per shard: the worker keeps the last two
versions and deletes a shard's when the shard ends. The state is kept out of the leases table on
purpose: every lease taker scans that table. Same billing, encryption, recovery and removal
conventions as the leases table beside it (infra/leases_table.py).
"""

from __future__ import annotations

from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct

from ground.settings import WorkerSettings
from infra.leases_table import fleet_table_conventions


class WindowStateTable(Construct):
    def __init__(
        self, scope: Construct, construct_id: str, *, name: str, settings: WorkerSettings, protect: bool
    ) -> None:
        super().__init__(scope, construct_id)
        self.table = dynamodb.Table(
            self,
            "Table",
            table_name=name,
            partition_key=dynamodb.Attribute(name="shard", type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name="sequence", type=dynamodb.AttributeType.STRING),
            # The state belongs with the checkpoints: recoverable, protected and billed the same way.
            **fleet_table_conventions(settings, protect),
        )
