"""File operations on the table's storage root through Hadoop's FileSystem (local, s3a://, hdfs://).

Spark writes the Parquet; this is the small rest the pipeline needs (manifests, listings, deletes)
on the same file systems and with the same configuration as Spark, via the session's JVM.

Paths on the local file system are served by Python directly. Through the JVM each operation
costs several py4j round trips, and without Hadoop's native library its local file system forks
``chmod`` for every file and directory it creates; footers, listings and manifest writes took
about half a second of an update batch that way. Results are spelled as Hadoop spells them
(``file:/abs/path``), so callers cannot tell the two apart.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from horizon_broker._core.errors import FailedPrecondition, Unavailable


@dataclass(frozen=True, slots=True)
class FileInfo:
    path: str
    size: int
    modified_s: float = 0.0
    """When the file was last written (Unix time): a changelog file's arrival."""


CONNECT_REFUSAL = (
    "ingestion needs a classic Spark session, not Spark Connect: it writes segments and its "
    "commit log through the Hadoop FileSystem API of Spark's JVM, which Connect does not expose. "
    "Run the ingestion server with a master instead (--spark-master local[*], or "
    "spark://host:7077 next to your cluster); brokers can still use Spark Connect"
)


def require_classic_session(spark: Any) -> None:
    """Refuse a Spark Connect session before anything is written (never fail halfway)."""
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        raise FailedPrecondition(CONNECT_REFUSAL)


class Storage:
    """Hadoop FileSystem operations for paths under any URI Spark can write."""

    def __init__(self, spark: Any) -> None:
        require_classic_session(spark)
        self._jvm = spark.sparkContext._jvm
        self._conf = spark.sparkContext._jsc.hadoopConfiguration()
        default_fs = str(self._conf.get("fs.defaultFS") or "file:///")
        self._schemeless_is_local = default_fs.startswith("file:")

    def _local(self, path: str) -> str | None:
        """The operating system path of ``path`` when it is on the local file system, else None."""
        if path.startswith("file:"):
            return _os_path(path)
        if urlsplit(path).scheme or not self._schemeless_is_local:
            return None
        return os.path.abspath(path)

    def local_path(self, path: str) -> str | None:
        """The operating system path of ``path`` when it is on the local file system (what
        pyarrow may read and write directly), else None."""
        return self._local(path)

    def _path(self, path: str) -> tuple[Any, Any]:
        jpath = self._jvm.org.apache.hadoop.fs.Path(path)
        return jpath.getFileSystem(self._conf), jpath

    def qualify(self, path: str) -> str:
        """The fully qualified URI of ``path`` (``file:/...`` for local paths)."""
        fs, jpath = self._path(path)
        return str(fs.makeQualified(jpath).toString())

    def uri(self, path: str) -> str:
        """``path`` as a URI (percent-encoded), the form of Spark's ``_metadata.file_path``."""
        return str(self._jvm.org.apache.hadoop.fs.Path(path).toUri().toString())

    def exists(self, path: str) -> bool:
        local = self._local(path)
        if local is not None:
            return os.path.exists(local)
        fs, jpath = self._path(path)
        return bool(fs.exists(jpath))

    def delete(self, path: str) -> None:
        """Delete a file or a directory tree; absent paths are fine (deletes are retried)."""
        local = self._local(path)
        if local is not None:
            _delete_local(local)
            return
        fs, jpath = self._path(path)
        if fs.exists(jpath):
            fs.delete(jpath, True)

    def list_dir(self, path: str) -> list[FileInfo]:
        """The direct children of a directory (files and directories), sorted by name."""
        local = self._local(path)
        if local is not None:
            if not os.path.isdir(local):
                return []
            with os.scandir(local) as entries:
                found = [_local_info(entry) for entry in entries if not _is_checksum(entry.name)]
            return sorted(found, key=lambda info: info.path)
        fs, jpath = self._path(path)
        if not fs.exists(jpath):
            return []
        return sorted(
            (FileInfo(str(status.getPath().toString()), int(status.getLen()))
             for status in fs.listStatus(jpath)),
            key=lambda info: info.path,
        )  # fmt: skip

    def list_files(self, path: str, *, suffix: str = "") -> list[FileInfo]:
        """Every data file under ``path`` (recursively), skipping hidden and marker files."""
        local = self._local(path)
        if local is not None:
            if os.path.isfile(local):
                directory, name = os.path.split(local)
                walked = [(directory, [], [name])]
            else:
                walked = list(os.walk(local))
            found = []
            for directory, _, names in walked:
                for name in names:
                    if name.startswith(("_", ".")) or not name.endswith(suffix):
                        continue
                    full = os.path.join(directory, name)
                    stat = os.stat(full)
                    modified_s = stat.st_mtime_ns // 1_000_000 / 1000  # in ms, as Hadoop's
                    found.append(FileInfo(_hadoop_spelling(full), stat.st_size, modified_s))
            return sorted(found, key=lambda info: info.path)
        fs, jpath = self._path(path)
        if not fs.exists(jpath):
            return []
        found: list[FileInfo] = []
        iterator = fs.listFiles(jpath, True)
        while iterator.hasNext():
            status = iterator.next()
            name = status.getPath().getName()
            if name.startswith(("_", ".")) or not name.endswith(suffix):
                continue
            found.append(
                FileInfo(
                    str(status.getPath().toString()),
                    int(status.getLen()),
                    int(status.getModificationTime()) / 1000,
                )
            )
        return sorted(found, key=lambda info: info.path)

    def parquet_footer(self, path: str, *columns: str) -> tuple[int, tuple[Any, ...]]:
        """The row count of a Parquet file and the greatest value of each of ``columns`` (``None``
        when the footer states none), from the footer alone."""
        local = self._local(path)
        if local is not None:
            return _local_footer(local, columns)
        jpath = self._jvm.org.apache.hadoop.fs.Path(path)
        parquet = self._jvm.org.apache.parquet.hadoop
        reader = parquet.ParquetFileReader.open(
            parquet.util.HadoopInputFile.fromPath(jpath, self._conf)
        )
        try:
            blocks = list(reader.getFooter().getBlocks())
        finally:
            reader.close()
        rows = sum(int(block.getRowCount()) for block in blocks)
        if not blocks:
            return rows, (None,) * len(columns)
        # Every block lists the same columns in the same order: find the wanted ones once.
        paths = [chunk.getPath().toDotString() for chunk in blocks[0].getColumns()]

        def greatest(column: str) -> Any:
            if column not in paths:
                return None
            position = paths.index(column)
            maxima = []
            for block in blocks:
                statistics = block.getColumns().get(position).getStatistics()
                if statistics is None or statistics.isEmpty():
                    return None  # a writer that kept no statistics: unknown
                if statistics.hasNonNullValue():
                    maxima.append(statistics.genericGetMax())
            return max(maxima, default=None)

        return rows, tuple(greatest(column) for column in columns)

    def write_atomically(self, path: str, text: str) -> None:
        """Write ``text`` to a temporary name, then rename it into place.

        A reader never sees a torn file: a crash leaves at most a ``.tmp`` file, which readers skip.
        """
        local = self._local(path)
        if local is not None:
            temporary = local + ".tmp"
            os.makedirs(os.path.dirname(local), exist_ok=True)  # as Hadoop's create does
            with open(temporary, "w", encoding="utf-8") as stream:
                stream.write(text)
            _remove_checksum(local)  # Hadoop would check the new text against an old checksum
            os.replace(temporary, local)
            return
        fs, jpath = self._path(path)
        temporary = self._jvm.org.apache.hadoop.fs.Path(path + ".tmp")
        stream = fs.create(temporary, True)
        try:
            stream.write(bytearray(text.encode("utf-8")))
        finally:
            stream.close()
        if fs.exists(jpath):
            fs.delete(jpath, False)
        if not fs.rename(temporary, jpath):
            raise Unavailable(f"could not rename {path}.tmp into place")

    def read_text(self, path: str) -> str:
        local = self._local(path)
        if local is not None:
            with open(local, encoding="utf-8") as stream:
                return "\n".join(stream.read().splitlines())
        fs, jpath = self._path(path)
        stream = fs.open(jpath)
        try:
            reader = self._jvm.java.io.BufferedReader(
                self._jvm.java.io.InputStreamReader(stream, "UTF-8")
            )
            lines = []
            line = reader.readLine()
            while line is not None:
                lines.append(line)
                line = reader.readLine()
            return "\n".join(lines)
        finally:
            stream.close()


def _os_path(uri: str) -> str:
    """``file:/a/b``, ``file:///a/b`` or ``file://localhost/a/b`` -> ``/a/b`` (no decoding: Hadoop
    spells local paths unencoded)."""
    rest = uri[len("file:") :]
    if rest.startswith("//"):
        rest = rest[2:]
        rest = rest[rest.index("/") :] if "/" in rest else "/"
    return os.path.abspath(rest)


def _hadoop_spelling(local: str) -> str:
    """How Hadoop's ``Path.toString()`` spells a local file: ``file:/abs/path``."""
    return "file:" + os.path.abspath(local)


def _local_info(entry: os.DirEntry[str]) -> FileInfo:
    size = 0 if entry.is_dir() else entry.stat().st_size
    return FileInfo(_hadoop_spelling(entry.path), size)


def _is_checksum(name: str) -> bool:
    return name.startswith(".") and name.endswith(".crc")


def _checksum_of(local: str) -> str:
    """The checksum file Hadoop's local file system keeps beside a file it wrote."""
    directory, name = os.path.split(local)
    return os.path.join(directory, f".{name}.crc")


def _remove_checksum(local: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(_checksum_of(local))


def _delete_local(local: str) -> None:
    """Delete a file or tree; what vanishes meanwhile (another deleter) is not an error."""

    def vanished_is_fine(function: Any, path: str, error: Any) -> None:
        if not isinstance(error[1], FileNotFoundError):
            raise error[1]

    if os.path.isdir(local) and not os.path.islink(local):
        shutil.rmtree(local, onerror=vanished_is_fine)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.remove(local)
    _remove_checksum(local)


def _local_footer(local: str, columns: Sequence[str]) -> tuple[int, tuple[Any, ...]]:
    """:meth:`Storage.parquet_footer` of a local file, read by pyarrow (same rules)."""
    import pyarrow.parquet as pq

    metadata = pq.read_metadata(local)
    rows = int(metadata.num_rows)
    if metadata.num_row_groups == 0:
        return rows, (None,) * len(columns)
    names = [metadata.schema.column(i).path for i in range(metadata.num_columns)]

    def greatest(column: str) -> Any:
        if column not in names:
            return None
        position = names.index(column)
        maxima = []
        for group in range(metadata.num_row_groups):
            statistics = metadata.row_group(group).column(position).statistics
            if statistics is None:
                return None  # a writer that kept no statistics: unknown
            if statistics.has_min_max:
                maxima.append(statistics.max)
            elif not statistics.has_null_count:
                return None
        return max(maxima, default=None)

    return rows, tuple(greatest(column) for column in columns)
