"""Kafka Streams 4.3.1 from Maven Central (fetched once into
``~/.cache/rafka/kafka-streams-4.3.1`` with its dependencies; nothing of it is committed) and
the tests' own Streams application (``EosCopy.java``, compiled once into the same cache):
a Kafka user's exactly_once_v2 pipeline, unmodified, against rafka's Kafka listener."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

STREAMS_VERSION = "4.3.1"
LOG4J_VERSION = "2.24.3"
SOURCE = Path(__file__).with_name("EosCopy.java")
# Warnings only, on stderr (a properties file: Streams' jars have no YAML parser).
LOG4J2 = """status = error
appender.stderr.type = Console
appender.stderr.name = STDERR
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d %p %c: %m%n
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = STDERR
"""

POM = f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>rafka.tests</groupId><artifactId>kafka-streams-app</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-streams</artifactId>
      <version>{STREAMS_VERSION}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId><version>{LOG4J_VERSION}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-core</artifactId><version>{LOG4J_VERSION}</version></dependency>
  </dependencies>
</project>
"""


def cache_dir() -> Path:
    return Path(os.environ.get("RAFKA_KAFKA_STREAMS_CACHE", Path.home() / ".cache" / "rafka"
                               / f"kafka-streams-{STREAMS_VERSION}"))


def streams_app() -> tuple[Path, Path]:
    """(the jars' directory, the compiled application's directory), made on first use."""
    from benchmarks.peers import maven_jars
    cache = cache_dir()
    lib = maven_jars(cache, POM, "Kafka Streams")
    classes = cache / "classes"
    compiled = classes / "EosCopy.class"
    source_text = SOURCE.read_text()
    stamp = classes / "EosCopy.java"
    if not compiled.exists() or not stamp.exists() or stamp.read_text() != source_text:
        classes.mkdir(parents=True, exist_ok=True)
        javac = shutil.which("javac")
        assert javac, "javac is not on PATH (Java 17 is part of this machine's set-up)"
        subprocess.run([javac, "-d", str(classes), "-cp", f"{lib}/*", str(SOURCE)],
                       check=True, capture_output=True, text=True, timeout=300)
        stamp.write_text(source_text)
    return lib, classes


def start_app(bootstrap_servers: str, application_id: str, source: str, sink: str,
              state_dir: Path, log: Path) -> subprocess.Popen:
    """The application as its own JVM process; its stdout (``STATE ...`` lines) to
    ``log``."""
    lib, classes = streams_app()
    log4j = state_dir / "log4j2.properties"
    state_dir.mkdir(parents=True, exist_ok=True)
    log4j.write_text(LOG4J2)
    out = open(log, "w")
    return subprocess.Popen(
        [shutil.which("java"), "-Xmx384m", "-XX:+UseSerialGC", "-cp", f"{classes}:{lib}/*",
         f"-Dlog4j2.configurationFile={log4j}", "EosCopy", bootstrap_servers,
         application_id, source, sink, str(state_dir / "state")],
        stdout=out, stderr=subprocess.STDOUT)
