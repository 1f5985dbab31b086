"""``assertDataFrameEqual`` that works with the installed pandas.

pyspark 4.3's ``assertDataFrameEqual`` imports ``pyspark.pandas`` whenever pandas and pyarrow are
importable, only to check whether its arguments are pandas frames; ``pyspark.pandas`` fails to
import with pandas 3 (``DateOffset`` moved). Our arguments are always Spark DataFrames, so pyarrow is
hidden for the duration of the call and the function takes its Spark-only path — the comparison
itself is PySpark's, unchanged.
"""

from __future__ import annotations

import sys
from typing import Any

from pyspark.sql import DataFrame
from pyspark.testing import assertDataFrameEqual


def assert_frames_equal(actual: DataFrame, expected: DataFrame, **options: Any) -> None:
    saved = sys.modules.get("pyarrow")
    sys.modules["pyarrow"] = None  # type: ignore[assignment]  # makes `import pyarrow` raise ImportError
    try:
        assertDataFrameEqual(actual, expected, **options)
    finally:
        if saved is None:
            del sys.modules["pyarrow"]
        else:
            sys.modules["pyarrow"] = saved
