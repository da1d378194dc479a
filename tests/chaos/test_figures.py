"""The run's figures count time from the readers' start, the origin of the fault windows too, so
a fault window and the reads inside it can be laid side by side (the 1800 s run mixed two
origins 38.6 s apart)."""

from __future__ import annotations

from bench import chaos_figures as figures
from chaos.history import Anomaly, Fault, History, Read

READERS_START = 1000.0


def test_availability_and_anomalies_count_from_the_readers_start() -> None:
    history = History(
        faults=[Fault("broker_kill", READERS_START + 10, READERS_START + 20)],
        reads=[
            Read("r1", "bank", "q", "lwm", READERS_START + 12, READERS_START + 13, snapshot=5,
                 broker="b2"),
            Read("r2", "bank", "q", "lwm", READERS_START + 14, READERS_START + 15,
                 error="UNAVAILABLE", message="gone", broker="b1"),
            Read("r1", "bank", "q", "lwm", READERS_START + 30, READERS_START + 31, snapshot=6),
        ],
    )  # fmt: skip
    shares = figures.availability(history, READERS_START)
    killed = shares["broker_kill"]
    assert (killed["queries"], killed["answered"], killed["share"]) == (2, 1, 0.5)
    assert killed["unanswered"] == ["14.0-15.0 s r2 lwm on b1: UNAVAILABLE gone"]
    assert shares["no fault"]["share"] == 1.0
    anomaly = Anomaly("lost_write", "missing", history.reads[2])
    assert figures.first_anomaly_s([anomaly], READERS_START) == 30.0
    assert figures.detail(anomaly, READERS_START).startswith("30.0 s: lost_write")
