"""Record processing: the processor API (class and function forms) and the failure policy.

See docs/processing.md. What the lifecycle uses: :func:`build_processor_factory` at start-up,
then ``factory(shard)`` per lease, driving the returned :class:`RecordProcessor`.
"""

from consumer.processing.api import (
    Batch,
    BatchHandler,
    BatchResult,
    Checkpointer,
    InitializationInput,
    LeaseLostInput,
    ProcessorFactory,
    ProcessRecordsInput,
    RecordProcessor,
    ShardEndedInput,
    ShardScoped,
    ShutdownRequestedInput,
)
from consumer.processing.errors import (
    CheckpointRefusedError,
    DeadLetterError,
    HandlerStoppedError,
    LeaseLostError,
    NonRetryableError,
    ProcessingConfigError,
    ProcessingError,
)
from consumer.processing.factory import ProcessingClients, build_processor_factory, function_processor
from consumer.processing.memory_checkpointer import InMemoryCheckpointer

__all__ = [
    "Batch",
    "BatchHandler",
    "BatchResult",
    "CheckpointRefusedError",
    "Checkpointer",
    "DeadLetterError",
    "HandlerStoppedError",
    "InMemoryCheckpointer",
    "InitializationInput",
    "LeaseLostError",
    "LeaseLostInput",
    "NonRetryableError",
    "ProcessRecordsInput",
    "ProcessingClients",
    "ProcessingConfigError",
    "ProcessingError",
    "ProcessorFactory",
    "RecordProcessor",
    "ShardEndedInput",
    "ShardScoped",
    "ShutdownRequestedInput",
    "build_processor_factory",
    "function_processor",
]
