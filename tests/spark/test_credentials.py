"""The connector's credential options reach the driver and the executors: a user the options
name (not the admin of the environment the Spark workers inherit) plans, reads and writes, and
its missing ACLs fail the tasks; wrong or half-given options fail on the driver naming the
option; secrets stay out of reprs, and Spark's redaction covers the secret options."""
from __future__ import annotations

import re
import uuid

import pytest
from pyspark.errors.exceptions.captured import CapturedException

from lib.admin import AdminClient
from spark_sink.options import OptionError, read_options, write_options
from tests.integration.test_consumer_common import wait_for
from tests.spark.test_batch import read

PASSWORD = "spark-alice-password"


@pytest.fixture
def alice(masters):
    """A user ``alice-<random>`` who may only describe a fresh topic, and the topic."""
    name, topic = f"alice-{uuid.uuid4().hex[:6]}", f"creds-{uuid.uuid4().hex[:8]}"
    with AdminClient(masters) as admin:
        admin.add_user(name, PASSWORD)
        admin.create_topic(topic, partitions=2)
        admin.add_acl(f"user:{name}", "describe", "topic", topic)
        yield name, topic, admin


def write(df, masters: str, **options: str) -> None:
    writer = df.write.format("tubeq").option("masters", masters)
    for k, v in options.items():
        writer = writer.option(k, v)
    writer.mode("append").save()


def test_the_options_user_plans_reads_and_writes_in_the_executors(spark, masters, alice):
    user, topic, admin = alice
    creds = {"user": user, "password": PASSWORD}
    df = spark.createDataFrame([(f"v{i}",) for i in range(50)], "value string")
    # describe is enough to plan on the driver; the tasks need produce, which alice lacks
    # (the workers' environment is the admin's: only the options make them alice)
    # (the producer's first call, for its idempotent producer id, is the one refused)
    with pytest.raises(CapturedException, match=f"producing to {topic} needs a producer id, "
                                                f"refused: {user} may not produce on any topic"):
        write(df, masters, topic=topic, **creds)
    admin.add_acl(f"user:{user}", "produce", "topic", topic)
    # Retried until the ACL reaches the broker: an attempt whose tasks straddle its arrival
    # stores one task's rows and fails the job (a batch write is at least once), so values
    # may repeat; every one of them must be there.
    wait_for(lambda: _succeeds(lambda: write(df, masters, topic=topic, **creds)), 30,
             "alice's produce ACL on the brokers")
    with pytest.raises(CapturedException, match=f"{user} may not consume on topic '{topic}'"):
        read(spark, masters, subscribe=topic, **creds).collect()
    admin.add_acl(f"user:{user}", "consume", "topic", topic)
    rows = wait_for(lambda: _rows(spark, masters, topic, creds), 30, "alice's consume ACL")
    assert {r.value.decode() for r in rows} == {f"v{i}" for i in range(50)}
    assert len(rows) >= 50
    with pytest.raises(CapturedException, match="wrong user or password"):
        read(spark, masters, subscribe=topic, user=user, password="not-the-password").collect()
    token = admin.login(user, PASSWORD).token
    assert len(read(spark, masters, subscribe=topic, token=token).collect()) == len(rows)


def _succeeds(action) -> bool:
    try:
        action()
        return True
    except CapturedException:
        return False


def _rows(spark, masters: str, topic: str, creds: dict) -> list | None:
    try:
        return read(spark, masters, subscribe=topic, **creds).collect()
    except CapturedException:
        return None


@pytest.mark.parametrize(("options", "expected"), [
    ({"user": "a"}, "tubeq option 'password': required with user"),
    ({"password": "p"}, "tubeq option 'user': required with password"),
    ({"user": "a", "password": "p", "token": "t"}, "tubeq option 'token': cannot be combined "
                                                   "with user"),
    ({"token": "t", "credentialsFile": "/f"}, "'credentialsFile': cannot be combined with "
                                              "token"),
    ({"tlsCert": "c.pem"}, "tubeq option 'tlsKey': tlsCert and tlsKey go together"),
    ({"tlsCert": "c.pem", "tlsKey": "k.pem"}, "tubeq option 'tlsCa': required with tlsCert"),
])
def test_half_given_credentials_name_the_option(options, expected):
    for parse, more in ((read_options, {"subscribe": "t"}), (write_options, {})):
        with pytest.raises(OptionError, match=re.escape(expected)):
            parse({"masters": "h:1", **more, **options})


def test_secrets_stay_out_of_reprs_and_spark_redacts_their_options(spark):
    opts = read_options({"masters": "h:1", "subscribe": "t", "user": "u",
                         "password": "hunter2-secret"})
    assert "hunter2-secret" not in repr(opts) and opts.conn.credentials().user == "u"
    assert "tok-secret" not in repr(write_options({"masters": "h:1", "token": "tok-secret"}))
    # Spark's own setting, or its built-in default (read from the JVM: not ours to restate)
    config = getattr(spark._jvm.org.apache.spark.internal.config, "package$")
    entry = getattr(config, "MODULE$").SECRET_REDACTION_PATTERN()
    regex = spark.sparkContext.getConf().get(entry.key(), entry.defaultValueString())
    assert re.search(regex, "password") and re.search(regex, "token")
