"""The quiet Spark session: what it hides (precisely) and what it never hides (errors)."""

from __future__ import annotations

import io
import warnings

from pipeline.session import JVM_NOISE, QUIET_LOG4J2, quiet_python_warnings, relay


def test_the_jvm_relay_drops_the_incubator_banner_and_keeps_everything_else() -> None:
    lines = [
        b"WARNING: Using incubator modules: jdk.incubator.vector\n",
        b"26/11/24 03:33:05 ERROR Executor: Exception in task 0.0 in stage 1.0\n",
        b"java.lang.OutOfMemoryError: Java heap space\n",
        b"Traceback (most recent call last):\n",
    ]
    out = io.StringIO()
    relay(iter(lines), out)
    assert out.getvalue() == "".join(line.decode() for line in lines[1:])
    assert len(JVM_NOISE) == 1  # widen it only for lines that are noise whatever happened


def test_spark_logs_errors_only_and_names_the_gateway_logger() -> None:
    settings = dict(
        line.split(" = ", 1) for line in QUIET_LOG4J2.splitlines() if line and not line.startswith("#")
    )
    assert settings["rootLogger.level"] == "error"
    assert settings["appender.console.target"] == "SYSTEM_ERR"
    assert settings["logger.gateway.name"] == "org.apache.spark.api.python.PythonGatewayServer"
    assert settings["logger.gateway.level"] == settings["rootLogger.level"]


def test_only_pysparks_pandas_support_warning_is_ignored() -> None:
    environ = {"PYTHONWARNINGS": "default::ResourceWarning"}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_python_warnings(environ)
        quiet_python_warnings(environ)  # idempotent
        warnings.warn("PySpark does not yet fully support pandas >= 3.0.0. Some", FutureWarning, stacklevel=1)
        warnings.warn("PySpark does not yet fully support pandas >= 3.0.0.", UserWarning, stacklevel=1)
        warnings.warn("pandas: this keyword is deprecated", FutureWarning, stacklevel=1)
    assert [(w.category, str(w.message)) for w in caught] == [
        (UserWarning, "PySpark does not yet fully support pandas >= 3.0.0."),
        (FutureWarning, "pandas: this keyword is deprecated"),
    ]
    assert environ["PYTHONWARNINGS"] == (
        "default::ResourceWarning,ignore:PySpark does not yet fully support pandas:FutureWarning"
    )
