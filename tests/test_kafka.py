"""A Kafka topic as an ingest source (``kafka://HOST:PORT/TOPIC``), against a real broker.

The broker is Apache Kafka in KRaft mode (one node, broker and controller), run from its jars,
which Maven fetches once into ``~/.cache/idivm/kafka-<version>/libs`` (or ``$IDIVM_KAFKA_LIBS``).
Without Java 17+ or the jars the broker tests are skipped, naming why, unless
``IDIVM_KAFKA_REQUIRED`` is set (as in CI), where they fail.

* Debezium events on a 2-partition topic (every op, a tombstone, bad messages of each kind) give
  the table and the quarantine worked out by hand; quarantined records name partition and offset.
* Exactly once: ingesting again takes nothing; new messages are taken alone; a crash after a
  Delta commit and before the consumer group's offsets are committed doubles nothing, nor does one
  between the quarantine's commit and the table's.
* ``strict``, and the command line.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from idivm import cli
from idivm.errors import DataError
from idivm.ingest import kafka
from idivm.storage import delta
from idivm.warehouse import Warehouse

from test_feeds import BASE, content, ev, version

KAFKA_VERSION = "4.1.1"


# --- the broker ----------------------------------------------------------------------------------

POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>idivm.tests</groupId>
  <artifactId>kafka-broker</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>{version}</version>
    </dependency>
    <!-- the broker logs through SLF4J 1.7: to log4j2, configured by LOG4J below -->
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>2.24.3</version>
    </dependency>
  </dependencies>
</project>
"""

SERVER = """process.roles=broker,controller
node.id=1
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
controller.quorum.bootstrap.servers=127.0.0.1:{controller}
log.dirs={data}
num.partitions=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
"""

LOG4J = """status = error
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.console.ref = STDOUT
"""

JVM = ["-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true"]


def unavailable(reason: str):
    """Skip (or, with IDIVM_KAFKA_REQUIRED set, fail) for want of a broker."""
    if os.environ.get("IDIVM_KAFKA_REQUIRED"):
        pytest.fail(f"no Kafka broker: {reason}")
    pytest.skip(f"no Kafka broker: {reason}")


def java() -> str:
    home = os.environ.get("JAVA_HOME")
    path = str(Path(home, "bin", "java")) if home else shutil.which("java")
    if not path or not Path(path).exists():
        where = f"at {path}" if home else "on the PATH"
        unavailable(f"no java {where} (the Kafka {KAFKA_VERSION} broker needs Java 17 or later)")
    out = subprocess.run([path, "-version"], capture_output=True, text=True, timeout=60).stderr
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    major = int(m.group(1)) if m else 0
    major = int(m.group(2) or 0) if major == 1 else major
    if major < 17:
        unavailable(f"{path} is Java {major or '?'}; the Kafka {KAFKA_VERSION} broker needs Java 17 or later")
    return path


def kafka_libs() -> Path:
    """The directory of the broker's jars, fetched with Maven the first time."""
    if os.environ.get("IDIVM_KAFKA_LIBS"):
        libs = Path(os.environ["IDIVM_KAFKA_LIBS"])
    else:
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        libs = cache / "idivm" / f"kafka-{KAFKA_VERSION}" / "libs"
    if list(libs.glob("kafka_2.13-*.jar")):
        return libs
    mvn = shutil.which("mvn")
    if mvn is None:
        unavailable(f"the Kafka jars are not in {libs} and there is no mvn to fetch them")
    work = libs.parent / f"fetch-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    (work / "pom.xml").write_text(POM.format(version=KAFKA_VERSION))
    try:
        done = subprocess.run([mvn, "-q", "-B", "dependency:copy-dependencies", f"-DoutputDirectory={work / 'libs'}",
                               "-DincludeScope=runtime"], cwd=work, capture_output=True, text=True, timeout=600)
        if done.returncode != 0 or not list((work / "libs").glob("kafka_2.13-*.jar")):
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            unavailable(f"mvn could not fetch org.apache.kafka:kafka_2.13:{KAFKA_VERSION}:\n{tail}")
        try:
            os.replace(work / "libs", libs)  # whole or not at all (another run may have won the race)
        except OSError:
            pass
    except subprocess.TimeoutExpired:
        unavailable("mvn took more than 10 minutes to fetch the Kafka jars")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return libs


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    """A running single-node broker: ``bootstrap`` (HOST:PORT), topics to create and messages to send."""

    def __init__(self, bootstrap: str):
        from kafka import KafkaProducer
        from kafka.admin import KafkaAdminClient

        self.bootstrap = bootstrap
        self.admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
        self.producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)

    def topic(self, partitions: int = 2) -> str:
        """A new topic (its name unique in the run)."""
        from kafka.admin import NewTopic

        name = f"users-{uuid.uuid4().hex[:8]}"
        self.admin.create_topics([NewTopic(name, partitions, 1)], timeout_ms=10_000)
        return name

    def send(self, topic: str, messages) -> None:
        """Send ``(partition, value)`` messages in order: a value of text, bytes or None (a tombstone)."""
        for partition, value in messages:
            data = value.encode() if isinstance(value, str) else value
            self.producer.send(topic, key=b"k", value=data, partition=partition)
        self.producer.flush(timeout=30)

    def committed(self, topic: str, group: str = "idivm.users") -> dict[int, int]:
        """The consumer group's committed offsets of ``topic``, by partition."""
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=group, enable_auto_commit=False)
        try:
            offsets = {p: consumer.committed(TopicPartition(topic, p)) for p in consumer.partitions_for_topic(topic)}
        finally:
            consumer.close(autocommit=False)
        return {p: o for p, o in offsets.items() if o is not None}

    def close(self) -> None:
        self.producer.close(timeout=5)
        self.admin.close()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """A Kafka broker (KRaft, one node) on free loopback ports, for the tests of this module."""
    pytest.importorskip("kafka", reason="the kafka-python client is not installed")
    path = java()
    libs = kafka_libs()
    home = tmp_path_factory.mktemp("kafka")
    port, controller = free_port(), free_port()
    (home / "server.properties").write_text(SERVER.format(port=port, controller=controller, data=home / "data"))
    (home / "log4j2.properties").write_text(LOG4J)
    run = [path, *JVM, f"-Dlog4j2.configurationFile={home / 'log4j2.properties'}", "-cp", f"{libs}/*"]
    # a cluster id as kafka-storage random-uuid makes them; one starting with "-" would read as an option
    cluster = "-"
    while cluster.startswith("-"):
        cluster = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
    formatted = subprocess.run([*run, "kafka.tools.StorageTool", "format", "--standalone", "-t", cluster,
                                "-c", str(home / "server.properties")], capture_output=True, text=True, timeout=120)
    if formatted.returncode != 0:
        pytest.fail(f"kafka-storage format failed:\n{formatted.stdout}{formatted.stderr}")
    log = open(home / "broker.log", "wb")
    process = subprocess.Popen([*run, "kafka.Kafka", str(home / "server.properties")], stdout=log,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    running = None
    try:
        deadline = time.monotonic() + 60
        while running is None:
            if process.poll() is not None:
                pytest.fail(f"the Kafka broker exited ({process.returncode}):\n"
                            + (home / "broker.log").read_text(errors="replace")[-3000:])
            if time.monotonic() > deadline:
                pytest.fail("the Kafka broker did not start in 60 s:\n"
                            + (home / "broker.log").read_text(errors="replace")[-3000:])
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                running = Broker(f"127.0.0.1:{port}")
                probe = running.topic(1)
                running.send(probe, [(0, "{}")])  # a producer works
            except Exception:
                if running is not None:
                    running.close()
                running = None
                time.sleep(0.3)
        yield running
    finally:
        if running is not None:
            running.close()
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        log.close()


# --- helpers -------------------------------------------------------------------------------------

@pytest.fixture
def wh(tmp_path):
    w = Warehouse(tmp_path / "wh")
    w.create_table("users", "id", BASE)
    return w

def origins(wh):
    """The origins of the table's commits, oldest first."""
    return [c["idivm.origin"] for c in reversed(delta.history(wh.table_path("users"))) if "idivm.origin" in c]


def url(broker, topic):
    return f"kafka://{broker.bootstrap}/{topic}"


def taken(r):
    """The names of the batches an ingest took: its batches, itself (one batch) or none (the topic's name)."""
    if r.batches:
        return [b.source for b in r.batches]
    return [] if r.source.startswith("kafka://") else [r.source]


PRETTY = json.dumps({"before": None, "after": {"id": 7, "name": "gus", "score": 70}, "op": "c"}, indent=2)
ENVELOPE = json.dumps({"schema": {"type": "struct", "fields": []},
                       "payload": {"before": {"id": 6}, "after": {"id": 6, "name": "fay", "score": 61}, "op": "u"}})

EVENTS = [
    (0, ev("c", after={"id": 3, "name": "cy", "score": 30})),                       # [0]@0 insert
    (0, ev("u", before={"id": 1}, after={"id": 1, "name": "ann", "score": 11})),    # [0]@1 update
    (0, None),                                                                      # [0]@2 tombstone
    (0, '{"op": "c", "after": {"id": 9'),                                           # [0]@3 malformed
    (0, ev("d", before={"id": 2})),                                                 # [0]@4 delete
    (1, ev("c", after={"id": 5, "name": "eve", "score": "high"})),                  # [1]@0 wrong type
    (1, ev("c", after={"id": 6, "name": "fay", "score": 60})),                      # [1]@1 insert
    (1, ENVELOPE),                                                                  # [1]@2 update in an envelope
    (1, PRETTY),                                                                    # [1]@3 JSON on several lines
    (1, b"\xff\xfe{}"),                                                             # [1]@4 not UTF-8
]

AFTER_EVENTS = [{"id": 1, "name": "ann", "score": 11}, {"id": 3, "name": "cy", "score": 30},
                {"id": 6, "name": "fay", "score": 61}, {"id": 7, "name": "gus", "score": 70}]


# --- without a broker ----------------------------------------------------------------------------

def test_sources_and_origins_are_parsed():
    assert kafka.parse("kafka://127.0.0.1:9093/cdc.users") == kafka.Topic(("127.0.0.1:9093",), "cdc.users")
    assert kafka.parse("kafka://a:1,b/t").servers == ("a:1", "b:9092")
    for bad in ("kafka://host:1", "kafka:///t", "kafka://host:x/t", "kafka://host:1/a/b", "kafka://h:1/"):
        with pytest.raises(DataError, match="expected kafka://HOST:PORT/TOPIC"):
            kafka.parse(bad)
    assert kafka.parse_origin(kafka.origin("a.b-c", 3, 10, 41)) == ("a.b-c", 3, 10, 41)
    assert kafka.parse_origin("sha256:00") is None and kafka.parse_origin("kafka:t:x:1-2") is None
    assert kafka._line(None) == ("", None) and kafka._line(b"") == ("", None)
    assert kafka._line(b'{"a": 1}') == ('{"a": 1}', None)
    assert kafka._line(b'{"a":\n "x\\u2028"}') == ('{"a": "x\\u2028"}', None)  # one line, escaped
    line, (reason, text) = kafka._line("{\n".encode())
    assert line == kafka.PLACEHOLDER and reason.startswith("invalid JSON") and text == "{\n"


def test_a_topic_is_read_into_a_table_only():
    from idivm.ingest.feeds import batches

    with pytest.raises(DataError, match="a Kafka topic is read to be ingested into a table"):
        list(batches("kafka://127.0.0.1:9/t"))


# --- with a broker -------------------------------------------------------------------------------

def test_events_on_two_partitions_give_the_table_and_quarantine_worked_out_by_hand(broker, wh):
    topic = broker.topic(2)
    broker.send(topic, EVENTS)
    r = wh.ingest("users", url(broker, topic))
    assert [b.source for b in r.batches] == [f"{topic}[0]@0-4", f"{topic}[1]@0-4"]
    assert [b.version for b in r.batches] == [1, 2]
    # [0]: c 3, u 1, d 2 (tombstone skipped); [1]: c 6 + u 6 (one insert), c 7
    assert (r.changes, r.inserted, r.updated, r.deleted, r.skipped, r.quarantined) == (6, 3, 1, 1, 1, 3)
    assert content(wh) == AFTER_EVENTS
    assert origins(wh) == [f"kafka:{topic}:0:0-4", f"kafka:{topic}:1:0-4"]
    q = wh.quarantined("users").to_pylist()
    assert [(x["source"], x["line"]) for x in q] == [(f"{topic}[0]", 3), (f"{topic}[1]", 0), (f"{topic}[1]", 4)]
    assert q[0]["reason"].startswith("invalid JSON") and q[0]["record"] == EVENTS[3][1]
    assert "column 'score' (int64) expects an integer, got a string \"high\"" in q[1]["reason"]
    assert q[2]["reason"] == "not UTF-8 text (invalid start byte at byte 0)" and q[2]["record"] == "\\xff\\xfe{}"
    assert [x["origin"] for x in q] == [f"kafka:{topic}:0:0-4", f"kafka:{topic}:1:0-4", f"kafka:{topic}:1:0-4"]
    assert broker.committed(topic) == {0: 5, 1: 5}


def test_again_nothing_is_taken_then_only_the_new_messages(broker, wh):
    topic = broker.topic(2)
    broker.send(topic, EVENTS)
    wh.ingest("users", url(broker, topic))
    again = wh.ingest("users", url(broker, topic))
    assert (taken(again), again.changes, again.version) == ([], 0, 2)
    assert version(wh) == 2 and wh.quarantined("users").num_rows == 3
    broker.send(topic, [(1, ev("d", before={"id": 6})), (0, ev("u", after={"id": 3, "name": "cy", "score": 31})),
                        (1, ev("c", after={"id": 8, "name": "hal", "score": 80}))])
    r = wh.ingest("users", url(broker, topic))
    assert [(b.source, b.version) for b in r.batches] == [(f"{topic}[0]@5-5", 3), (f"{topic}[1]@5-6", 4)]
    assert (r.changes, r.inserted, r.updated, r.deleted, r.quarantined) == (3, 1, 1, 1, 0)
    assert content(wh) == [{"id": 1, "name": "ann", "score": 11}, {"id": 3, "name": "cy", "score": 31},
                           {"id": 7, "name": "gus", "score": 70}, {"id": 8, "name": "hal", "score": 80}]
    assert broker.committed(topic) == {0: 6, 1: 7}
    assert taken(wh.ingest("users", url(broker, topic))) == [] and version(wh) == 4


def test_a_crash_between_the_delta_commit_and_the_offsets_commit_doubles_nothing(broker, wh, monkeypatch):
    topic = broker.topic(2)
    broker.send(topic, [(0, ev("u", after={"id": 1, "name": "ann", "score": 11})),
                        (0, ev("c", after={"id": 3, "name": "cy", "score": 30})),
                        (1, ev("d", before={"id": 2}))])
    real = kafka.commit_offset
    monkeypatch.setattr(kafka, "commit_offset", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        wh.ingest("users", url(broker, topic))
    # partition 0 is in the table, the broker does not know
    assert version(wh) == 1 and origins(wh) == [f"kafka:{topic}:0:0-1"] and broker.committed(topic) == {}
    monkeypatch.setattr(kafka, "commit_offset", real)
    r = wh.ingest("users", url(broker, topic))
    # partition 0 is not read again (the Delta log says it was taken), partition 1 is taken now
    assert taken(r) == [f"{topic}[1]@0-0"] and r.version == 2
    assert origins(wh) == [f"kafka:{topic}:0:0-1", f"kafka:{topic}:1:0-0"]
    assert broker.committed(topic) == {0: 2, 1: 1}  # the broker's offsets caught up
    broker.send(topic, [(0, ev("u", after={"id": 3, "name": "cy", "score": 33}))])
    r = wh.ingest("users", url(broker, topic))
    assert taken(r) == [f"{topic}[0]@2-2"] and (r.updated, r.version) == (1, 3)
    assert content(wh) == [{"id": 1, "name": "ann", "score": 11}, {"id": 3, "name": "cy", "score": 33}]


def test_the_broker_offsets_do_not_decide_where_reading_starts(broker, wh):
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    topic = broker.topic(1)
    broker.send(topic, [(0, ev("c", after={"id": 3, "name": "cy", "score": 30})),
                        (0, ev("c", after={"id": 4, "name": "dee", "score": 40}))])
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="idivm.users", enable_auto_commit=False)
    c.commit({TopicPartition(topic, 0): OffsetAndMetadata(2, "", -1)})  # ahead of the table: ignored
    c.close()
    r = wh.ingest("users", url(broker, topic))
    assert taken(r) == [f"{topic}[0]@0-1"] and r.inserted == 2
    assert broker.committed(topic) == {0: 2}


def test_a_crash_between_the_quarantine_and_the_table_commit_reads_the_same_offsets_again(broker, wh, monkeypatch):
    import idivm.ingest as ingest

    topic = broker.topic(1)
    broker.send(topic, [(0, ev("c", after={"id": 3, "name": "cy", "score": 30})), (0, "[1]")])
    real = ingest.apply_changes
    monkeypatch.setattr(ingest, "apply_changes", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        wh.ingest("users", url(broker, topic))
    assert version(wh) == 0 and wh.quarantined("users").num_rows == 1
    monkeypatch.setattr(ingest, "apply_changes", real)
    broker.send(topic, [(0, ev("c", after={"id": 4, "name": "dee", "score": 40}))])
    r = wh.ingest("users", url(broker, topic))
    # the quarantined batch again, over the same offsets (quarantined once), then the new message
    assert [(b.source, b.inserted, b.quarantined) for b in r.batches] == [(f"{topic}[0]@0-1", 1, 1),
                                                                          (f"{topic}[0]@2-2", 1, 0)]
    assert wh.quarantined("users").num_rows == 1 and version(wh) == 2
    assert [row["id"] for row in content(wh)] == [1, 2, 3, 4]
    assert broker.committed(topic) == {0: 3}


def test_strict_names_partition_and_offset_and_applies_nothing(broker, wh):
    topic = broker.topic(1)
    broker.send(topic, [(0, ev("c", after={"id": 3, "name": "cy", "score": 30})),
                        (0, ev("c", after={"id": 4, "score": "x"}))])
    with pytest.raises(DataError, match=rf"^{topic}\[0\]@1: after: column 'score' \(int64\) expects an integer"):
        wh.ingest("users", url(broker, topic), strict=True)
    assert version(wh) == 0 and broker.committed(topic) == {}
    broker.send(topic, [(0, ev("c", after={"id": 5, "email": "e"}))])
    with pytest.raises(DataError, match=rf"^{topic}\[0\]@0-2: column 'email' \({topic}\[0\]@2\) not in the table"):
        wh.ingest("users", url(broker, topic))
    with pytest.raises(DataError, match="no topic 'nope'"):
        wh.ingest("users", url(broker, "nope"))


def test_the_command_line_ingests_a_topic(broker, wh):
    topic = broker.topic(2)
    broker.send(topic, [(0, ev("c", after={"id": 3, "name": "cy", "score": 3})),
                        (1, ev("c", after={"id": 4, "name": "dee", "score": "four"})),
                        (1, ev("d", before={"id": 1}))])
    runner = CliRunner()

    def idivm(*args):
        return runner.invoke(cli.cli, ["--warehouse", str(wh.path), *args], obj=cli.CliState())

    r = idivm("ingest", "users", url(broker, topic))
    assert r.exit_code == 3, r.output
    assert f"ingested 1 change from {topic}[0]@0-0 into users: 1 inserted, 0 updated, 0 deleted; version 1" in r.output
    assert (f"ingested 1 change from {topic}[1]@0-1 into users: 0 inserted, 0 updated, 1 deleted, "
            "1 quarantined; version 2") in r.output
    assert "1 record quarantined: see 'idivm quarantine show users'" in r.output
    r = idivm("quarantine", "show", "users")
    assert r.exit_code == 0 and r.output.startswith(f"{topic}[1]@0: after: column 'score' (int64) expects an integer")
    r = idivm("ingest", "users", url(broker, topic))
    assert r.exit_code == 0
    assert f"ingested 0 changes from {url(broker, topic)} into users: nothing to commit, version 2" in r.output
    assert [row["id"] for row in content(wh)] == [2, 3]
