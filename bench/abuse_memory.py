"""Peak resident memory of the broker process and of its JVM, for ``python -m bench.abuse``."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class MemoryWatch:
    """Peak RSS of the broker process and of its JVM, sampled every 0.2 s."""

    broker_pid: int
    peak_broker: int = 0
    peak_jvm: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> MemoryWatch:
        threading.Thread(target=self._run, daemon=True).start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.peak_broker = max(self.peak_broker, _rss(self.broker_pid))
            jvm = jvm_of(self.broker_pid)
            if jvm is not None:
                self.peak_jvm = max(self.peak_jvm, _rss(jvm))

    def stop(self) -> None:
        self._stop.set()


def _rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def jvm_of(pid: int) -> int | None:
    """The Java process among ``pid``'s descendants."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    pending = [pid]
    while pending:
        for child in children.get(pending.pop(), []):
            try:
                command = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")[0]
            except OSError:
                continue
            if command.endswith(b"java"):
                return child
            pending.append(child)
    return None
