"""docs/getting-started.md works as written: its marked commands, run in order in a fresh virtual
environment where the package was installed by pip from a wheel, print what the page shows.

The install step is the one block not run from the page: the test builds the wheel from a clean
copy of the checkout and installs it (with its dependencies, from the index pip is set up with)
into a new virtual environment, whose ``bin`` comes first on the PATH as ``activate`` would put
it. The broker the page starts with ``horizon serve --embedded-redis`` listens on free ports here
(``HORIZON_CONFIG`` says port 0), so the test puts this run's broker address where the page shows
``127.0.0.1:50051`` and the Redis URL the broker printed where the page shows its own.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import venv
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path

import pytest

from tests.packaging.walkthrough import (
    Block,
    as_script,
    marked_blocks,
    missing_from,
    outputs_by_block,
    shown_outputs,
)
from tests.waiting import eventually

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "getting-started.md"
DEFAULT_TARGET = "127.0.0.1:50051"
LISTENING = re.compile(r"^horizon broker listening on (\S+)$", re.M)
REDIS_URL = re.compile(r"redis://[\w.]+:\d+/\d+")
BROKER_START_S = 180.0
WALKTHROUGH_S = 600.0
SERVE_LINES_S = 30.0
"""How long the lines printed after the listening one may take (a loaded machine)."""
TERMINAL_COLUMNS = "250"
"""A terminal wide enough that no line the page shows wraps (rich wraps at the width it finds)."""
UNSET = ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH", "PYTHONHOME")
UNSET_HORIZON = ("HORIZON_TARGET", "HORIZON_TOKEN", "HORIZON_CONFIG")


def page_blocks() -> list[Block]:
    return marked_blocks(PAGE.read_text())


def test_the_page_marks_a_serve_block_then_commands_with_the_outputs_they_print() -> None:
    blocks = page_blocks()
    kinds = [block.kind for block in blocks]
    assert kinds[0] == "serve" and kinds.count("serve") == 1
    assert {"sh", "python", "output"} <= set(kinds)
    assert all(block.text.strip() for block in blocks)
    assert shown_outputs(blocks)[0] == (0, blocks[1].text)


def test_a_shown_line_must_be_printed_whole_and_in_order() -> None:
    printed = "Spark noise\naccounts: batch 1: 3 rows, token hz1.abc\n│ 1 │ ada │ 100 │\n"
    assert (
        missing_from(printed, "accounts: batch 1: 3 rows, token hz1.…\n│ 1 │ ada │ 100 │") is None
    )
    assert missing_from(printed, "│ 1 │ ada │ 101 │") == "│ 1 │ ada │ 101 │"
    assert missing_from(printed, "│ 1 │ ada │ 100 │\naccounts: batch 1: …") is not None
    assert missing_from(printed, "accounts: batch 1") is not None  # a whole line, not a prefix
    assert missing_from("listening on 127.0.0.1:41234", "listening on 127.0.0.1:50051") is None


def test_the_script_runs_every_command_block_in_order_and_marks_their_output() -> None:
    blocks = [
        Block("serve", "horizon serve"),
        Block("sh", "echo one"),
        Block("output", "one"),
        Block("python", "print('two at 127.0.0.1:50051')"),
    ]
    script = as_script(blocks, {DEFAULT_TARGET: "127.0.0.1:7"})
    assert "horizon serve" not in script and "127.0.0.1:7" in script
    printed = subprocess.run(
        ["bash", "-c", script.replace("python -", f"{sys.executable} -")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert outputs_by_block(printed) == {1: "\none\n", 3: "\ntwo at 127.0.0.1:7\n"}


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with the wheel of a clean copy of the checkout installed by
    pip, dependencies and all; returns its ``bin``."""
    environment = tmp_path_factory.mktemp("env")
    venv.EnvBuilder(with_pip=True).create(environment)
    python = environment / "bin" / "python"
    install = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*install, str(wheel)], check=True, capture_output=True)
    return environment / "bin"


def activated(bin_dir: Path) -> dict[str, str]:
    """The environment a reader has after ``. horizon-env/bin/activate``, and nothing of the
    checkout's own virtual environment or of a broker they may have set up before, in a wide
    terminal."""
    environment = {
        key: value for key, value in os.environ.items() if key not in UNSET + UNSET_HORIZON
    }
    environment["VIRTUAL_ENV"] = str(bin_dir.parent)
    environment["COLUMNS"] = TERMINAL_COLUMNS
    environment["PATH"] = f"{bin_dir}{os.pathsep}{environment.get('PATH', '')}"
    return environment


@pytest.fixture
def broker(installed: Path, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """The page's serve block, started in the walk-through's directory on free ports; stopped
    with Ctrl-C as the page says (killed, with its Spark, if the test failed before)."""
    (serve,) = (block for block in page_blocks() if block.kind == "serve")
    work = tmp_path / "walkthrough"
    work.mkdir()
    (tmp_path / "free-ports.toml").write_text('[server]\nlisten = "127.0.0.1:0"\n')
    environment = {**activated(installed), "HORIZON_CONFIG": str(tmp_path / "free-ports.toml")}
    log = tmp_path / "serve.log"
    with log.open("w") as printed:
        process = subprocess.Popen(
            ["bash", "-c", f"exec {serve.text}"],
            cwd=work,
            env=environment,
            stdout=printed,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
    try:
        yield process, log
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def run_in_own_group(script: str, cwd: Path, environment: dict[str, str]) -> tuple[int, str]:
    """Run ``script`` with bash, stdout and stderr interleaved as a terminal shows them; a hang
    is ended with everything it started (an ingestion's Spark too)."""
    process = subprocess.Popen(
        ["bash", "-c", script],
        cwd=cwd,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        printed, _ = process.communicate(timeout=WALKTHROUGH_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        printed, _ = process.communicate()
        raise AssertionError(f"the walk-through hung:\n{printed}") from None
    return process.returncode, printed


@pytest.mark.processes
def test_the_getting_started_page_runs_as_written(
    installed: Path, broker: tuple[subprocess.Popen[str], Path]
) -> None:
    process, log = broker
    blocks = page_blocks()

    def started() -> str | None:
        if process.poll() is not None:
            raise AssertionError(f"horizon serve exited {process.returncode}:\n{log.read_text()}")
        found = LISTENING.search(log.read_text())
        return found[1] if found else None

    target = eventually(started, "horizon serve listening", patience_s=BROKER_START_S)
    ((_, serve_shown), *_) = shown_outputs(blocks)

    def printed_all() -> bool:
        return missing_from(log.read_text(), serve_shown) is None

    # The lines after the one that says it listens come a moment later (the Flight endpoint's).
    with suppress(AssertionError):
        eventually(printed_all, "horizon serve's start-up lines", patience_s=SERVE_LINES_S)
    serve_printed = log.read_text()
    assert (missing := missing_from(serve_printed, serve_shown)) is None, (
        f"horizon serve did not print {missing!r}:\n{serve_printed}"
    )
    (shown_redis,) = set(REDIS_URL.findall(serve_shown))
    (actual_redis,) = set(REDIS_URL.findall(serve_printed))
    script = as_script(blocks, {shown_redis: actual_redis, DEFAULT_TARGET: target})
    environment = {**activated(installed), "HORIZON_TARGET": target}
    returncode, printed = run_in_own_group(script, log.parent / "walkthrough", environment)
    (log.parent / "walkthrough.log").write_text(printed)  # kept with the test's files
    assert returncode == 0, f"a command of the page failed:\n{printed}"
    outputs = outputs_by_block(printed)
    for number, shown in shown_outputs(blocks)[1:]:
        output = outputs.get(number, "")
        assert (missing := missing_from(output, shown)) is None, (
            f"block {number} did not print {missing!r}:\n{blocks[number].text}\n---\n{output}"
        )

    os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole group
    assert process.wait(timeout=BROKER_START_S) == 0, log.read_text()
    assert "lost the state store" not in log.read_text(), log.read_text()
