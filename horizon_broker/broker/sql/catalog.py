"""What the rewriter knows about registered tables: columns, key, snapshot bounds, visible files.

The broker builds a :class:`Catalog` for each query from its follower's state (descriptors, the
current low-watermarks, the timeline's visible segments and the temp view registered over them).
The rewriter only reads it, so it stays a pure function of (SQL text, catalog).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from horizon_broker._core.errors import InvalidArgument
from horizon_broker.broker.sql.feed_files import FileValidity
from horizon_broker.watermark.catalog import ColumnSpec, TableDescriptor
from horizon_broker.watermark.schema_versions import SchemaHistory

#: Database qualifiers that mean "Horizon's registered tables" (``default.t``, ``horizon.t``).
REGISTERED_NAMESPACES = frozenset({"default", "horizon"})

#: Catalog qualifiers accepted in three-part names (``spark_catalog.default.t``).
REGISTERED_CATALOGS = frozenset({"spark_catalog"})


@dataclass(frozen=True, slots=True)
class CatalogTable:
    """One registered table as a query may read it.

    ``lwm`` is the table's current low-watermark (None while unknown), ``retention_horizon`` the
    lowest snapshot still readable. ``source_view`` is the Spark temp view over the table's visible
    segment files (``segments``/``files`` are reported in the plan for passthrough clients).

    The files may be split between up to four views (``horizon_broker.broker.spark.scan_layout``): settled segments
    (greatest ``validFrom`` known and at most the LWM) are read through ``settled_view`` (files
    mixing open and closed versions) and ``open_view`` (files of open versions only), and
    ``settled_through`` is the greatest ``validFrom`` of their rows: at snapshots at or above it
    those rows need no ``validFrom`` test. Files of closed versions only are read through
    ``closed_view``; ``closed_through`` is their greatest ``validUntil``, at or above which none
    of them is visible. ``source_view`` holds every other file, and is empty when there is none.
    """

    name: str
    columns: tuple[ColumnSpec, ...]
    primary_key: tuple[str, ...]
    upsert: bool
    lwm: int | None
    retention_horizon: int
    source_view: str
    segments: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    settled_view: str = ""
    settled_through: int | None = None
    open_view: str = ""
    closed_view: str = ""
    closed_through: int | None = None
    rows: int = 0
    """Stored row versions in the visible segments: an upper bound of what a scan reads (the
    work budget's estimates start from it)."""
    schema_history: SchemaHistory | None = None
    """The table's schema versions when it was ever altered (None: ``columns`` at every
    snapshot); a query reads the version in effect at its snapshot
    (:mod:`horizon_broker.broker.sql.passes.snapshot_schema`)."""
    file_validity: tuple[FileValidity, ...] = ()
    """Each visible file's validity bounds, as the timeline knows them: the change feed reads
    only the files whose versions may lie in its window (empty: it reads every file)."""
    view_columns: tuple[str, ...] = ()
    """The columns each of the table's views shows, in order (empty: not known). A scan whose
    derived table would list exactly these names the view directly
    (:mod:`horizon_broker.broker.sql.passes.name_views`)."""

    def __post_init__(self) -> None:
        if not self.columns:
            raise InvalidArgument(f"catalog table {self.name!r} has no columns")
        if self.upsert and not self.primary_key:
            raise InvalidArgument(f"upsert table {self.name!r} needs a primary key")
        if not self.views:
            raise InvalidArgument(f"catalog table {self.name!r} has no source view")
        if (self.settled_view or self.open_view) and self.settled_through is None:
            raise InvalidArgument(
                f"catalog table {self.name!r}: a settled view needs the greatest validFrom "
                "of its rows"
            )
        if self.closed_view and self.closed_through is None:
            raise InvalidArgument(
                f"catalog table {self.name!r}: a closed view needs the greatest validUntil "
                "of its rows"
            )

    @classmethod
    def from_descriptor(
        cls,
        descriptor: TableDescriptor,
        *,
        lwm: int | None,
        retention_horizon: int,
        source_view: str,
        segments: Iterable[str] = (),
        files: Iterable[str] = (),
        settled_view: str = "",
        settled_through: int | None = None,
        open_view: str = "",
        closed_view: str = "",
        closed_through: int | None = None,
        rows: int = 0,
        file_validity: Iterable[FileValidity] = (),
        view_columns: Iterable[str] = (),
    ) -> CatalogTable:
        """The catalog entry of a table a server published, with the broker's current state."""
        return cls(
            name=descriptor.name,
            columns=descriptor.columns,
            primary_key=descriptor.primary_key,
            upsert=descriptor.upsert,
            lwm=lwm,
            retention_horizon=retention_horizon,
            source_view=source_view,
            segments=tuple(segments),
            files=tuple(files),
            settled_view=settled_view,
            settled_through=settled_through,
            open_view=open_view,
            closed_view=closed_view,
            closed_through=closed_through,
            rows=rows,
            schema_history=descriptor.schema_history if descriptor.schema_versions else None,
            file_validity=tuple(file_validity),
            view_columns=tuple(view_columns),
        )

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(column.name for column in self.columns)

    @property
    def main_view(self) -> str:
        """The view a query's metadata names: the source view, or the first other one."""
        return self.views[0]

    @property
    def views(self) -> tuple[str, ...]:
        """Every temp view of this table, in the layout's order (``ScanLayout.names``)."""
        names = (self.source_view, self.settled_view, self.open_view, self.closed_view)
        return tuple(name for name in names if name)


class Catalog:
    """Registered tables by name; lookups are case-insensitive like Spark's default resolution."""

    __slots__ = ("_tables",)

    def __init__(self, tables: Iterable[CatalogTable] = ()) -> None:
        by_name: dict[str, CatalogTable] = {}
        for table in tables:
            key = table.name.lower()
            if key in by_name:
                raise InvalidArgument(f"table {table.name!r} is registered twice in the catalog")
            by_name[key] = table
        self._tables = by_name

    def get(self, name: str) -> CatalogTable | None:
        return self._tables.get(name.lower())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._tables

    def __iter__(self) -> Iterator[CatalogTable]:
        return iter(self._tables.values())

    def __len__(self) -> int:
        return len(self._tables)
