"""Record processing: the processor API (class and function forms) and the failure policy.

See docs/processing.md. The runtime builds a factory of :class:`RecordProcessor` at start-up
(:func:`consumer.runtime.processors.build_processor_factory`); the lifecycle calls ``factory(shard)``
per lease and drives the processor it returns.

What ``__all__`` names is the face a processor written outside consumer imports (beside
:mod:`consumer.records`; the rest of the face is :mod:`consumer.api`): the inputs and the two forms,
the errors, and for a processor's own tests the in-memory checkpointer and Lambda's event
(``streams_event``).
"""

from consumer.processing.api import (
    Batch,
    BatchHandler,
    BatchResult,
    Checkpointer,
    GapInput,
    InitializationInput,
    LeaseLostInput,
    ProcessorFactory,
    ProcessRecordsInput,
    RecordProcessor,
    ReloadedInput,
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
from consumer.processing.gap import GapEvent
from consumer.processing.lambda_event import streams_event
from consumer.processing.memory_checkpointer import InMemoryCheckpointer
from consumer.processing.windows import Window, WindowedBatch

__all__ = [
    "Batch",
    "BatchHandler",
    "BatchResult",
    "CheckpointRefusedError",
    "Checkpointer",
    "DeadLetterError",
    "GapEvent",
    "GapInput",
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
    "ReloadedInput",
    "ShardEndedInput",
    "ShardScoped",
    "ShutdownRequestedInput",
    "Window",
    "WindowedBatch",
    "function_processor",
    "streams_event",
    "windowed_processor",
]
