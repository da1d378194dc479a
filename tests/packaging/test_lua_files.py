"""The Redis scripts' Lua lives in ``lua/*.lua`` files beside the modules that run them: every file
is part of some script object (none orphaned), every script object is made of whole files (no
Lua left written in Python), and a script named after a file ends with exactly that file."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from types import ModuleType

import horizon_broker

PACKAGE_ROOT = Path(horizon_broker.__file__).resolve().parent

SCRIPT_MODULES = (
    "horizon_broker._core.keys",
    "horizon_broker.watermark.partition_lua",
    "horizon_broker.watermark.scripts",
    "horizon_broker.locks.scripts",
    "horizon_broker.pins.store",
    "horizon_broker.broker.engine.floor",
    "horizon_broker.ingest.redis_stream_read",
    "horizon_broker.ingest.redis_stream_trim",
)
"""Every module that loads Lua (a module left out leaves its files orphaned: the test says so)."""

CONSTANT_LINE = re.compile(r"local [A-Z_]+ = -?\d+\n")
"""What :func:`horizon_broker._core.lua.lua_constants` writes between files."""


def lua_files() -> dict[Path, str]:
    return {
        path: path.read_text(encoding="utf-8")
        for path in PACKAGE_ROOT.rglob("*.lua")
        if path.parent.name == "lua"
    }


def script_objects() -> dict[str, tuple[ModuleType, str]]:
    """``module.NAME`` -> (module, text) for every module-level string holding Lua."""
    found = {}
    for name in SCRIPT_MODULES:
        module = importlib.import_module(name)
        for attribute, value in vars(module).items():
            lua = isinstance(value, str) and ("redis.call(" in value or "local " in value)
            if lua and not attribute.startswith("__"):
                found[f"{name}.{attribute}"] = (module, value)
    return found


def pieces_of(text: str, files: dict[Path, str]) -> list[Path | str]:
    """``text`` as a sequence of whole files (longest first) and constant lines; fails where
    some of it is in no file."""
    ordered = sorted(files.items(), key=lambda item: -len(item[1]))
    pieces: list[Path | str] = []
    at = 0
    while at < len(text):
        match = next((path for path, body in ordered if text.startswith(body, at)), None)
        if match is not None:
            pieces.append(match)
            at += len(files[match])
            continue
        constant = CONSTANT_LINE.match(text, at)
        assert constant, f"Lua in no .lua file, from: {text[at : at + 120]!r}"
        pieces.append(constant.group())
        at = constant.end()
    return pieces


def own_file(module: ModuleType, attribute: str) -> Path:
    """``LOCK_LUA`` / ``LUA_KEYS`` / ``_COMMON`` -> ``lua/lock.lua`` / ``keys.lua`` / ``common.lua``."""
    stem = attribute.lower().strip("_").removesuffix("_lua").removeprefix("lua_")
    return Path(module.__file__ or "").resolve().parent / "lua" / f"{stem}.lua"


def test_every_lua_file_is_used_and_every_script_is_made_of_whole_files() -> None:
    files = lua_files()
    assert files, "no lua/*.lua files found in the package"
    used: set[Path] = set()
    named: set[Path] = set()
    for name, (module, text) in script_objects().items():
        pieces = pieces_of(text, files)
        used.update(piece for piece in pieces if isinstance(piece, Path))
        mine = own_file(module, name.rsplit(".", 1)[1])
        if mine in files:
            named.add(mine)
            assert pieces[-1] == mine, f"{name} does not end with {mine.name}"
    orphaned = sorted(str(path.relative_to(PACKAGE_ROOT)) for path in set(files) - used)
    assert not orphaned, f"lua files no script object loads: {orphaned}"
    unnamed = sorted(path.name for path in set(files) - named)
    assert not unnamed, f"lua files no script object is named after: {unnamed}"


def test_no_module_outside_the_list_writes_lua() -> None:
    writing = {
        path
        for path in PACKAGE_ROOT.rglob("*.py")
        if "redis.call(" in path.read_text(encoding="utf-8")
    }
    assert not writing, f"Lua written in Python (move it to lua/*.lua): {sorted(map(str, writing))}"
