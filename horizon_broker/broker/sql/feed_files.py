"""Which of a table's files a change feed over ``(start, end]`` must read (pure).

A version takes part in the feed of ``(start, end]`` only when its ``validFrom`` or its
``validUntil`` lies in the window. The timeline already knows, per segment, the greatest
``validFrom`` of its rows (``Segment.max_valid_from``), which of its files hold open versions only
(``open_files``) and the greatest ``validUntil`` of its other files when every row there is
closed (``max_valid_until``). So, for a window starting at ``start``:

* a file whose greatest ``validFrom`` is at or below ``start`` holds no version *beginning* in
  the window (no insert, no update after image, no neighbour of an ending version);
* an open file, or a closed one whose greatest ``validUntil`` is at or below ``start``, holds no
  version *ending* in the window.

Everything unknown is read. The feed filters each side's scan to the files that may hold it, by
file name: Spark prunes files on a filter of ``_metadata.file_name`` before it opens any of them.
A temp view hides that metadata column, so each segment view has a companion,
:func:`files_view` (its name + ``_f``), that reads the same files and shows each row's file name
as :data:`FILE_COLUMN`; the feed reads the companions. A name listed by mistake only costs a
read, never a row. Names that Spark could spell differently (any character beyond letters,
digits and ``._=-``) switch the pruning off for the table.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

MAX_LISTED_FILES = 512
"""Past this many candidate files a side reads every file (the SQL text stays small; the row
predicates still skip row groups)."""
_SAFE_NAME = re.compile(r"^[A-Za-z0-9._=-]+$")
FILES_SUFFIX = "_f"
FILE_COLUMN = "__horizon_file"
"""The companion view's column holding each row's file name (``_metadata.file_name``)."""
FILE_NAME_EXPRESSION = f"_metadata.file_name AS {FILE_COLUMN}"


def prunable(column_names: Iterable[str]) -> bool:
    """Whether a table's files can be told apart by name: no column of its own is called
    ``_metadata`` (it would hide Spark's) or :data:`FILE_COLUMN`."""
    return not {name.lower() for name in column_names} & {"_metadata", FILE_COLUMN}


def files_view(view: str) -> str:
    """The companion of segment view ``view``: the same files, plus :data:`FILE_COLUMN`."""
    return view + FILES_SUFFIX


@dataclass(frozen=True, slots=True)
class FileValidity:
    """What the timeline says of one file's validity columns."""

    name: str
    """The file's name (its path's last part), as Spark's ``_metadata.file_name`` gives it."""
    max_valid_from: int | None
    """The greatest ``validFrom`` of its segment's rows (None: unknown)."""
    max_valid_until: int | None
    """The greatest ``validUntil`` of its rows when all of them are closed (None: unknown)."""
    open: bool
    """Every row's ``validUntil`` is NULL."""

    def may_begin_after(self, start: int) -> bool:
        """Whether a version of this file may begin after ``start``."""
        return self.max_valid_from is None or self.max_valid_from > start

    def may_end_after(self, start: int) -> bool:
        """Whether a version of this file may end after ``start``."""
        return not self.open and (self.max_valid_until is None or self.max_valid_until > start)


def _name(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def file_validity(segments: Iterable[Any]) -> tuple[FileValidity, ...]:
    """Each file of ``segments`` (``Segment``-like) with its validity bounds, in segment order;
    empty when a name is not one Spark spells the same way (then nothing is pruned)."""
    files: list[FileValidity] = []
    for segment in segments:
        open_files = set(getattr(segment, "open_files", ()))
        max_valid_from = getattr(segment, "max_valid_from", None)
        max_valid_until = getattr(segment, "max_valid_until", None)
        for path in segment.location:
            name = _name(path)
            if not _SAFE_NAME.match(name):
                return ()
            is_open = path in open_files
            until = None if is_open else max_valid_until
            files.append(FileValidity(name, max_valid_from, until, is_open))
    return tuple(files)


BEGINS = "begins"
ENDS = "ends"


def side_filter(files: Sequence[FileValidity], side: str, start: int) -> str | None:
    """The predicate keeping the files that may hold versions that begin (``side`` BEGINS) or
    end (ENDS) after ``start``; None: read every file (nothing known, every file a candidate, or
    too many to list)."""
    if not files:
        return None
    if side == BEGINS:
        wanted = {f.name for f in files if f.may_begin_after(start)}
    else:
        wanted = {f.name for f in files if f.may_end_after(start)}
    if len(wanted) > MAX_LISTED_FILES or wanted >= {f.name for f in files}:
        return None
    if not wanted:
        return "FALSE"
    listed = ", ".join(f"'{name}'" for name in sorted(wanted))
    return f"{FILE_COLUMN} IN ({listed})"
