"""Record processing: the processor API (class and function forms) and the failure policy.

See docs/processing.md. The runtime builds a factory of :class:`RecordProcessor` at start-up
(:func:`consumer.runtime.processors.build_processor_factory`); the lifecycle calls ``factory(shard)``
per lease and drives the processor it returns.
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
from consumer.processing.factory import function_processor, windowed_processor
from consumer.processing.memory_checkpointer import InMemoryCheckpointer
from consumer.processing.windows import Window, WindowedBatch

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
    "ProcessingConfigError",
    "ProcessingError",
    "ProcessorFactory",
    "RecordProcessor",
    "ShardEndedInput",
    "ShardScoped",
    "ShutdownRequestedInput",
    "Window",
    "WindowedBatch",
    "function_processor",
    "windowed_processor",
]
