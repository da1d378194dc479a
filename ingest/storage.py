"""File operations on the table's storage root through Hadoop's FileSystem (local, s3a://, hdfs://).

Spark writes the Parquet; this is the small rest the pipeline needs (manifests, listings, deletes)
on the same file systems and with the same configuration as Spark, via the session's JVM.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from timeline.errors import Unavailable


@dataclass(frozen=True, slots=True)
class FileInfo:
    path: str
    size: int


class Storage:
    """Hadoop FileSystem operations for paths under any URI Spark can write."""

    def __init__(self, spark: Any) -> None:
        self._jvm = spark.sparkContext._jvm
        self._conf = spark.sparkContext._jsc.hadoopConfiguration()

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
        fs, jpath = self._path(path)
        return bool(fs.exists(jpath))

    def delete(self, path: str) -> None:
        """Delete a file or a directory tree; absent paths are fine (deletes are retried)."""
        fs, jpath = self._path(path)
        if fs.exists(jpath):
            fs.delete(jpath, True)

    def list_dir(self, path: str) -> list[FileInfo]:
        """The direct children of a directory (files and directories), sorted by name."""
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
            found.append(FileInfo(str(status.getPath().toString()), int(status.getLen())))
        return sorted(found, key=lambda info: info.path)

    def parquet_footer(self, path: str, column: str) -> tuple[int, Any]:
        """The row count of a Parquet file and the greatest value of ``column`` (``None`` when
        the footer states none), from the footer alone."""
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
            return rows, None
        # Every block lists the same columns in the same order: find the one wanted once.
        paths = [chunk.getPath().toDotString() for chunk in blocks[0].getColumns()]
        if column not in paths:
            return rows, None
        position = paths.index(column)
        maxima = []
        for block in blocks:
            statistics = block.getColumns().get(position).getStatistics()
            if statistics is None or statistics.isEmpty():
                return rows, None  # a writer that kept no statistics: unknown
            if statistics.hasNonNullValue():
                maxima.append(statistics.genericGetMax())
        return rows, max(maxima, default=None)

    def write_atomically(self, path: str, text: str) -> None:
        """Write ``text`` to a temporary name, then rename it into place.

        A reader never sees a torn file: a crash leaves at most a ``.tmp`` file, which readers skip.
        """
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
