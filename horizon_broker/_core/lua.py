"""Lua scripts kept as ``.lua`` files beside the modules that run them.

Each package that runs Redis scripts keeps their text in ``lua/<name>.lua`` (shipped in the wheel
as package data), so the Lua reads, diffs and lints as Lua. A script that shares pieces is
composed in Python by concatenating the pieces' texts, so each piece has one definition.
"""

from __future__ import annotations

from importlib.resources import files


def lua_file(package: str | None, name: str) -> str:
    """The text of ``lua/<name>.lua`` in ``package`` (pass the caller's ``__package__``)."""
    if not package:
        raise ValueError(f"lua file {name}.lua: the caller is not in a package")
    return (files(package) / "lua" / f"{name}.lua").read_text(encoding="utf-8")


def lua_constants(**values: int) -> str:
    """``local NAME = value`` lines: numbers a script takes from its Python module, so the
    Python constant stays their one definition."""
    return "".join(f"local {name} = {int(value)}\n" for name, value in values.items())
