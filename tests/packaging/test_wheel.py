"""The package installs one import name of its own: the wheel holds ``horizon_broker`` (the
generated gRPC stubs under it) and its metadata, nothing else, so it can sit beside the
distributions that own the generic names Horizon's rooms have (``watermark``, ``pins``...)."""

from __future__ import annotations

import subprocess
import sys
import venv
import zipfile
from pathlib import Path


def test_the_wheel_installs_only_the_horizon_broker_name(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    tops = {name.split("/", 1)[0] for name in names}
    assert {top for top in tops if not top.endswith(".dist-info")} == {"horizon_broker"}
    assert "horizon_broker/broker/_proto/horizon/v1/horizon_pb2.py" in names
    assert "horizon_broker/broker/console/templates/query.html" in names
    # the Redis scripts are read from their lua/*.lua files at import
    assert "horizon_broker/watermark/lua/segments.lua" in names
    assert "horizon_broker/_core/lua/keys.lua" in names
    for checkout_only in ("demo/", "chaos/", "bench/", "tests/"):
        assert not any(name.startswith(checkout_only) for name in names)
    with zipfile.ZipFile(wheel) as archive:
        (entry_points,) = (n for n in names if n.endswith(".dist-info/entry_points.txt"))
        assert "horizon = horizon_broker.cli:main" in archive.read(entry_points).decode()


def test_watermark_and_pins_from_the_package_index_import_beside_it(
    wheel: Path, tmp_path: Path
) -> None:
    environment = tmp_path / "env"
    venv.EnvBuilder(with_pip=False).create(environment)
    python = environment / "bin" / "python"
    # This interpreter's pip installs into the new environment (``--python``), so the
    # environment needs no pip of its own; byte-compiling what it installs is not checked.
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
               "--disable-pip-version-check", "--no-compile"]  # fmt: skip
    subprocess.run([*install, "watermark", "pins"], check=True)
    subprocess.run([*install, "--no-deps", str(wheel)], check=True)
    probe = (
        "import horizon_broker, pins, watermark, pathlib\n"
        "for module in (horizon_broker, pins, watermark):\n"
        "    print(module.__name__, pathlib.Path(module.__file__).parent.name)\n"
        "print(hasattr(watermark, 'WaterMark'), hasattr(pins, 'board_temp'))\n"
    )
    shown = subprocess.run(
        [str(python), "-c", probe], check=True, capture_output=True, text=True
    ).stdout.split("\n")
    assert shown[:4] == [
        "horizon_broker horizon_broker",
        "pins pins",
        "watermark watermark",
        "True True",
    ]
