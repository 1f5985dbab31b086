"""A worker, assembled and run: what ``consumer run`` starts and what the benchmarks build.

:class:`WorkerProcess` is the whole process on AWS or the emulator. :func:`assemble` is the
composition root a benchmark calls with ports of its own (the lease store port, here with its
in-memory adapter; canned GetRecords answers): it returns the worker's :class:`Parts` -- the lease
coordinator, shard sync and the scheduler of the shard consumers -- which a benchmark may step or
measure one by one. The stream port's pieces (the shard, the DynamoDB Streams adapter and its
reader, the GetRecords parser, the DescribeStream timetable) are here for the benchmarks that
measure them against a floor.
"""

from consumer.leases.coordinator import LeaseCoordinator
from consumer.leases.memory import InMemoryLeaseStore
from consumer.leases.store import LeaseStore
from consumer.lifecycle.scheduler import Scheduler
from consumer.lifecycle.shard_consumer import ShardConsumer
from consumer.lifecycle.shard_sync import ShardSyncer
from consumer.lifecycle.states import ShardState
from consumer.runtime.assembly import Parts, Ports, assemble
from consumer.runtime.gc_tuning import tune_for_long_running
from consumer.runtime.process import WorkerProcess
from consumer.runtime.processors import build_processor_factory
from consumer.runtime.worker import new_worker_id
from consumer.streams.dynamodb import DynamoDBStreamSource
from consumer.streams.errors import FatalStreamError
from consumer.streams.pacing import FleetPosition, SlotSchedule
from consumer.streams.reader import ShardReader
from consumer.streams.source import Shard
from consumer.streams.target import StreamConfigError
from consumer.streams.wire import parse_get_records

__all__ = [
    "DynamoDBStreamSource",
    "FatalStreamError",
    "FleetPosition",
    "InMemoryLeaseStore",
    "LeaseCoordinator",
    "LeaseStore",
    "Parts",
    "Ports",
    "Scheduler",
    "Shard",
    "ShardConsumer",
    "ShardReader",
    "ShardState",
    "ShardSyncer",
    "SlotSchedule",
    "StreamConfigError",
    "WorkerProcess",
    "assemble",
    "build_processor_factory",
    "new_worker_id",
    "parse_get_records",
    "tune_for_long_running",
]
