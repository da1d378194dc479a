"""The full-disk fault of a chaos run is a real ENOSPC under segment storage while it is in force
(and space again after), and a kind this machine cannot inject is reported as such, never
recorded as a fault window nor a crash of the run. No process is started: a Cluster's
constructor only writes files and opens its loopback proxies."""

from __future__ import annotations

import errno
import threading
from pathlib import Path

import pytest

from chaos.cluster import Cluster
from chaos.faults import Faults
from tests.waiting import eventually


@pytest.fixture
def cluster(tmp_path: Path):  # type: ignore[no-untyped-def]
    built = Cluster(tmp_path, {"server-1": [0, 1]}, brokers=1)
    yield built
    built.stop()


def _write_fails_with_enospc(storage: Path) -> bool:
    try:
        (storage / "probe").write_bytes(b"x" * 4096)
    except OSError as error:
        return error.errno == errno.ENOSPC
    (storage / "probe").unlink()
    return False


def test_a_full_disk_refuses_writes_under_storage_with_enospc_while_in_force(cluster) -> None:  # type: ignore[no-untyped-def]
    cluster._limit_storage()
    if cluster.disk_limited is not None:
        pytest.skip(f"this machine may not mount a tmpfs: {cluster.disk_limited}")
    faults = Faults(cluster, None, seed=1, short=True)
    faults.pause_s = (1.0, 1.0)  # the window: long enough to see, no longer
    injecting = threading.Thread(target=faults.inject, args=("disk_full",))
    injecting.start()
    eventually(lambda: _write_fails_with_enospc(cluster.storage), "ENOSPC under storage")
    injecting.join()
    (cluster.storage / "after").write_bytes(b"x" * 4096)  # space again once it ended
    assert faults.counts == {"disk_full": 1} and not faults.failures


def test_a_kind_this_machine_cannot_inject_is_reported_not_recorded(cluster) -> None:  # type: ignore[no-untyped-def]
    cluster.disk_limited = "mount: permission denied"
    faults = Faults(cluster, None, seed=1, short=True)
    faults.inject("disk_full")
    assert faults.not_runnable == {"disk_full": "mount: permission denied"}
    assert faults.recorded == [] and not faults.counts
