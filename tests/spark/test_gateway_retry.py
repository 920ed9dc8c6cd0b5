"""get_or_create: a JVM that dies before it starts (grpc/grpc#43055) is started again, a few
times at most; any other failure is not retried."""
from __future__ import annotations

import pytest
from pyspark.errors import PySparkRuntimeError

from spark_sink.pipelines.local import GATEWAY_TRIES, get_or_create


class Builder:
    """Stands in for SparkSession.builder: fails ``failures`` times with ``error``."""

    def __init__(self, failures: int, error: str = "JAVA_GATEWAY_EXITED") -> None:
        self.failures, self.error, self.calls = failures, error, 0

    def getOrCreate(self):  # noqa: N802 - pyspark's name
        self.calls += 1
        if self.calls <= self.failures:
            raise PySparkRuntimeError(errorClass=self.error, messageParameters={})
        return "session"


def test_a_jvm_that_exited_before_starting_is_started_again(capsys):
    builder = Builder(failures=GATEWAY_TRIES - 1)
    assert get_or_create(builder) == "session"
    assert builder.calls == GATEWAY_TRIES
    assert "starting it again" in capsys.readouterr().err


def test_it_gives_up_after_its_tries():
    builder = Builder(failures=GATEWAY_TRIES)
    with pytest.raises(PySparkRuntimeError):
        get_or_create(builder)
    assert builder.calls == GATEWAY_TRIES


def test_other_errors_are_not_retried():
    builder = Builder(failures=1, error="APPLICATION_NAME_NOT_SET")
    with pytest.raises(PySparkRuntimeError):
        get_or_create(builder)
    assert builder.calls == 1
