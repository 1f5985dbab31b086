"""The stream-enabled source table: imported by default, created only when asked (``table.create``).

Most teams adopt this product for a table that already exists and holds data; recreating it is
never an option, so importing is the default: the table ``table.existing_table_name`` (with its
``existing_stream_arn``) or else ``table.name``. Without a stream ARN the grants cover the streams
of that one table (``table/<name>/stream/*``: a stream's label changes when it is re-enabled), and
the worker finds the current one through the table's ``LatestStreamArn``. ``table.create: true``
makes the stack create (and retain) a new table instead.
"""

from __future__ import annotations

from aws_cdk import ArnFormat, RemovalPolicy, Stack
from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct

from ground.settings import KeyAttribute, TableSettings

_ATTRIBUTE_TYPES = {
    "S": dynamodb.AttributeType.STRING,
    "N": dynamodb.AttributeType.NUMBER,
    "B": dynamodb.AttributeType.BINARY,
}
_VIEW_TYPES = {
    "NEW_AND_OLD_IMAGES": dynamodb.StreamViewType.NEW_AND_OLD_IMAGES,
    "NEW_IMAGE": dynamodb.StreamViewType.NEW_IMAGE,
    "OLD_IMAGE": dynamodb.StreamViewType.OLD_IMAGE,
    "KEYS_ONLY": dynamodb.StreamViewType.KEYS_ONLY,
}


def _attribute(key: KeyAttribute) -> dynamodb.Attribute:
    return dynamodb.Attribute(name=key.name, type=_ATTRIBUTE_TYPES[key.type])


def imported_streams_arn(stack: Stack, table_name: str) -> str:
    """Every stream of the table ``table_name`` in the stack's account and region."""
    return stack.format_arn(
        service="dynamodb",
        resource="table",
        resource_name=f"{table_name}/stream/*",
        arn_format=ArnFormat.SLASH_RESOURCE_NAME,
    )


class SourceTable(Construct):
    """``table`` (ITable) and ``stream_arn`` of the table whose stream the fleet processes."""

    def __init__(
        self, scope: Construct, construct_id: str, *, settings: TableSettings, protect: bool
    ) -> None:
        super().__init__(scope, construct_id)
        self.created = settings.create
        if not settings.create:
            name = settings.source_table_name
            stream_arn = settings.existing_stream_arn or imported_streams_arn(Stack.of(self), name)
            self.table: dynamodb.ITable = dynamodb.Table.from_table_attributes(
                self, "Imported", table_name=name, table_stream_arn=stream_arn
            )
            self.stream_arn: str = stream_arn
            return
        provisioned = settings.billing_mode == "PROVISIONED"
        table = dynamodb.Table(
            self,
            "Table",
            table_name=settings.name,
            partition_key=_attribute(settings.partition_key),
            sort_key=_attribute(settings.sort_key) if settings.sort_key else None,
            billing_mode=dynamodb.BillingMode.PROVISIONED
            if provisioned
            else dynamodb.BillingMode.PAY_PER_REQUEST,
            read_capacity=settings.read_capacity if provisioned else None,
            write_capacity=settings.write_capacity if provisioned else None,
            stream=_VIEW_TYPES[settings.stream_view_type],
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=settings.point_in_time_recovery
            ),
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            deletion_protection=protect,
            # The table holds the team's data: never delete it with the stack.
            removal_policy=RemovalPolicy.RETAIN,
        )
        self.table = table
        created_stream = table.table_stream_arn
        assert created_stream is not None  # a stream was requested above
        self.stream_arn = created_stream
