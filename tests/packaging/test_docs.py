"""The documentation builds in strict mode: a broken link, a missing anchor or a page left out of
the nav fails the suite, and README.md's relative links point at files in the checkout (no doc
points outside the repository)."""

from __future__ import annotations

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
    return project


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
