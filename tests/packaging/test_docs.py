"""The documentation builds in strict mode: a broken link, a missing anchor or a page left out of
the nav fails the suite, and README.md's relative links point at files in the checkout (no doc
points outside the repository)."""

from __future__ import annotations

import argparse
import html
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MKDOCS = Path(sys.executable).parent / "mkdocs"
RELATIVE_LINK = re.compile(r"\]\((?!https?://|mailto:|#)([^)\s]+)\)")


def build(project: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict`` of ``project`` with the virtualenv's mkdocs, into ``site``."""
    environment = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [str(MKDOCS), "build", "--strict", "-f", str(project / "mkdocs.yml"), "-d", str(site)],
        capture_output=True,
        text=True,
        cwd=project,
        env=environment,
        check=False,
    )


@pytest.fixture
def copy_of_docs(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(ROOT / "mkdocs.yml", project / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", project / "docs")
    (project / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "reference_pages.py", project / "scripts")
    shutil.copytree(ROOT / "proto", project / "proto")
    return project


@pytest.fixture(scope="module")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("site")
    result = build(ROOT, site)
    assert result.returncode == 0, result.stdout + result.stderr
    return site


def page_text(site: Path, page: str) -> str:
    """A built page's text as a reader sees it: tags gone, entities decoded, whitespace single."""
    markup = (site / page / "index.html").read_text()
    article = markup.split("<article", 1)[1].split("</article>", 1)[0]
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", article)).split())


def spaced(text: str) -> str:
    """``text`` as :func:`page_text` shows it (code spans lose their backquotes)."""
    return " ".join(text.replace("``", "").replace("`", "").split())


def test_the_docs_build_in_strict_mode(tmp_path: Path) -> None:
    result = build(ROOT, tmp_path / "site")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "index.html").is_file()


def test_a_broken_link_fails_the_build(copy_of_docs: Path, tmp_path: Path) -> None:
    index = copy_of_docs / "docs" / "index.md"
    index.write_text(index.read_text() + "\n[gone](no-such-page.md)\n")
    result = build(copy_of_docs, tmp_path / "site")
    assert result.returncode != 0
    assert "no-such-page.md" in result.stdout + result.stderr


def test_a_page_missing_from_the_nav_fails_the_build(copy_of_docs: Path, tmp_path: Path) -> None:
    (copy_of_docs / "docs" / "orphan.md").write_text("# Not in the nav\n")
    result = build(copy_of_docs, tmp_path / "site")
    assert result.returncode != 0
    assert "orphan.md" in result.stdout + result.stderr


def test_the_readme_links_only_to_files_in_the_checkout() -> None:
    for target in RELATIVE_LINK.findall((ROOT / "README.md").read_text()):
        path = (ROOT / target.split("#", 1)[0]).resolve()
        assert path.is_relative_to(ROOT), f"README.md links outside the repository: {target}"
        assert path.exists(), f"README.md links to a missing file: {target}"


OUTSIDE_POINTER = re.compile(r"\.\./shared|shared/spec|shared/reference")
CHECKED_TREES = ("horizon_broker", "tests", "bench", "chaos", "demo", "docs", "scripts", "proto")


def test_no_doc_or_docstring_points_outside_the_repository() -> None:
    """The contract lives in docs/design/contract/: a user's clone has nothing beside it."""
    files = [ROOT / "README.md", ROOT / "Makefile", ROOT / "pyproject.toml"]
    for tree in CHECKED_TREES:
        files += [
            path
            for path in (ROOT / tree).rglob("*")
            if path.suffix in {".py", ".md", ".proto", ".sh", ".toml", ".lua"}
            and "_proto" not in path.parts
        ]
    pointing_out = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in files
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if OUTSIDE_POINTER.search(line) and path != Path(__file__)
    ]
    assert pointing_out == []


def every_parser() -> dict[str, argparse.ArgumentParser]:
    """``horizon``'s commands by name, each with the parser that reads its arguments (ingest and
    compact hand theirs to their own CLIs)."""
    from horizon_broker.cli import build_parser
    from horizon_broker.compaction.cli import build_parser as compact_parser
    from horizon_broker.ingest.cli import build_parser as ingest_parser

    environment = {name: os.environ.pop(name, None) for name in ("HORIZON_TARGET", "HORIZON_TOKEN")}
    try:
        (commands,) = (
            action
            for action in build_parser()._actions
            if isinstance(action, argparse._SubParsersAction)
        )
        parsers = dict(commands.choices)
        parsers.update(ingest=ingest_parser(), compact=compact_parser())
    finally:
        os.environ.update({k: v for k, v in environment.items() if v is not None})
    return parsers


def test_the_cli_reference_shows_every_command_argument_default_and_help(built_site: Path) -> None:
    """Generated from the parsers at build time: nothing the command accepts is missing."""
    text = page_text(built_site, "reference/cli")
    for name, parser in every_parser().items():
        assert f"horizon {name}" in text
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            for option in action.option_strings:
                assert option in text, f"horizon {name}: {option} is not in the CLI reference"
            if action.help:
                assert spaced(action.help) in text, f"horizon {name}: help {action.help!r}"
            if action.option_strings and action.default not in (None, False, "", []):
                row = f"{action.option_strings[-1]}"
                assert re.search(
                    re.escape(row) + r"(?: [A-Z_]+)? " + re.escape(str(action.default)), text
                ), f"horizon {name}: {row}'s default {action.default!r}"


def proto_comment_lines() -> list[str]:
    """Every comment line of horizon.proto that documents an element (not the section banners:
    a row of dashes and the title between two of them)."""
    lines = (ROOT / "proto" / "horizon" / "v1" / "horizon.proto").read_text().splitlines()
    comments = [line.split("//", 1)[1].strip() if "//" in line else None for line in lines]
    banner = {i for i, c in enumerate(comments) if c is not None and set(c) == {"-"}}
    titles = {i for i in range(len(comments)) if i - 1 in banner and i + 1 in banner}
    return [c for i, c in enumerate(comments) if c and i not in banner | titles]


def test_the_grpc_reference_shows_every_service_message_field_enum_and_comment(
    built_site: Path,
) -> None:
    """Generated from the proto file at build time, its comments included."""
    from horizon_broker.broker._proto.horizon.v1 import horizon_pb2

    text = page_text(built_site, "reference/grpc-api")
    unspaced = "".join(text.split())  # tags became spaces, so compare without any
    described = horizon_pb2.DESCRIPTOR
    for service in described.services_by_name.values():
        assert f"service {service.name}" in text
        for method in service.methods:
            assert f"rpc {method.name} ( {method.input_type.name} ) returns" in text
    for message in described.message_types_by_name.values():
        assert f"message {message.name}" in text
        for field in message.fields:
            assert f"{field.name} " in text, f"{message.name}.{field.name}"
    for enum in described.enum_types_by_name.values():
        assert f"enum {enum.name}" in text
        for value in enum.values:
            assert f"{value.name} {value.number}" in text
    for comment in proto_comment_lines():
        as_prose_or_text = {"".join(spaced(comment).split()), "".join(comment.split())}
        assert any(form in unspaced for form in as_prose_or_text), f"not shown: {comment!r}"


def test_no_placeholder_is_left_in_the_built_pages(built_site: Path) -> None:
    for page in built_site.rglob("*.html"):
        assert "<!-- generated:" not in page.read_text(), page


def test_an_unknown_placeholder_fails_the_build(copy_of_docs: Path, tmp_path: Path) -> None:
    index = copy_of_docs / "docs" / "index.md"
    index.write_text(index.read_text() + "\n<!-- generated: nothing-by-this-name -->\n")
    result = build(copy_of_docs, tmp_path / "site")
    assert result.returncode != 0
    assert "nothing-by-this-name" in result.stdout + result.stderr


CODE_PATH = re.compile(r"`((?:[\w-]+/)*[\w-]+(?:\.py|\.lua|\.proto|/))`")
NOT_CODE = {"horizon-data/", "bench/runs/"}
"""Paths the pages name that are not modules: the walk-through's data directory, run notes."""


def named_path_exists(named: str) -> bool:
    """A path the docs name in code: from the checkout, the package or the broker, or (a bare
    file or folder name, written after its room's path) anywhere in the package."""
    package = ROOT / "horizon_broker"
    bases = (ROOT, package, package / "broker", package / "ingest")
    if any((base / named).exists() for base in bases):
        return True
    name = named.rstrip("/")
    return "/" not in name and any(
        found.is_dir() == named.endswith("/") for found in (ROOT / "horizon_broker").rglob(name)
    )


def test_every_module_the_docs_name_exists() -> None:
    """Rooms get renamed (ingest/small became driver_rows): a page naming the old path fails."""
    missing = [
        f"{page.relative_to(ROOT)}: {named}"
        for page in sorted((ROOT / "docs").rglob("*.md"))
        for named in CODE_PATH.findall(page.read_text())
        if named not in NOT_CODE and not named_path_exists(named)
    ]
    assert missing == []


QUOTED_SECTION = re.compile(r"\b(?:see|under)\s+(?:the\s+)?\"[A-Z][^\"\n]{2,60}\"", re.IGNORECASE)


def test_pages_point_at_sections_by_links_not_quoted_names() -> None:
    """`see "Read controls"` is a link the strict build cannot check: pages write real links."""
    quoted = [
        f"{page.relative_to(ROOT)}: {' '.join(found.split())}"
        for page in sorted((ROOT / "docs").rglob("*.md"))
        for found in QUOTED_SECTION.findall(page.read_text())
    ]
    assert quoted == []
