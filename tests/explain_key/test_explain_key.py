"""ExplainKey through the real gRPC API over real ingestion and compaction histories
(:mod:`tests.explain_key.history`): each reason produced for real, and each answer checked against
what ``SELECT ... WHERE user_id = key`` at the same snapshot returns."""

from __future__ import annotations

import html
import json
import os
import re
from collections.abc import Iterator

import pytest

from horizon_broker import cli, tokens
from horizon_broker._core.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
)
from horizon_broker.broker._proto.horizon.v1 import horizon_pb2 as pb
from horizon_broker.client import HorizonClient, connect
from tests.broker.conftest import NO_INSPECT, READER
from tests.explain_key.history import ADMIN, History, break_and_restore, build, compact_ledger
from tests.observe.console_http import ConsoleHttp
from tests.waiting import eventually

pytestmark = [pytest.mark.spark, pytest.mark.redis]

VISIBLE = pb.KEY_VERSION_REASON_VISIBLE


@pytest.fixture(scope="module")
def history(spark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[History]:  # type: ignore[no-untyped-def]
    built = build(spark, tmp_path_factory.mktemp("explain_key"))
    yield built
    built.close()


@pytest.fixture(scope="module")
def horizon(history: History) -> Iterator[HorizonClient]:
    with connect(history.target, token=ADMIN) as client:
        yield client


def reasons(answer: pb.ExplainKeyResponse) -> list[tuple[int, str, str]]:
    """(validFrom, reason, segment state) of every stored copy, newest first."""
    return [
        (v.valid_from, pb.KeyVersionReason.Name(v.reason).removeprefix("KEY_VERSION_REASON_"),
         v.segment_state)
        for v in answer.versions
    ]  # fmt: skip


def of(answer: pb.ExplainKeyResponse, reason: str) -> list[pb.KeyVersion]:
    wanted = pb.KeyVersionReason.Value(f"KEY_VERSION_REASON_{reason}")
    return [v for v in answer.versions if v.reason == wanted]


def segments_read(answer: pb.ExplainKeyResponse) -> set[str]:
    """The segments the answer's snapshot reads (their versions are in ``read`` state)."""
    return {v.segment_id for v in answer.versions if v.segment_state == "read"}


def assert_query_agrees(horizon: HorizonClient, answer: pb.ExplainKeyResponse, key: str) -> None:
    """The version called visible is the row the query at that snapshot returns; none, none."""
    rows = horizon.query(
        f"SELECT user_id, balance, seq, deleted FROM {answer.table} "
        f"VERSION AS OF {answer.snapshot} WHERE user_id = '{key}'"
    ).to_pylist()
    visible = [json.loads(v.row_json) for v in answer.versions if v.reason == VISIBLE]
    assert rows == visible, reasons(answer)


def test_without_at_the_snapshot_is_the_one_a_query_reads_now(history, horizon):
    key = history.keys["p0"]
    answer = horizon.explain_key("accounts", key)
    query = horizon.execute(f"SELECT * FROM accounts WHERE user_id = '{key}'")
    assert answer.snapshot == query.snapshot
    assert answer.snapshot_source == pb.SNAPSHOT_SOURCE_LWM
    assert answer.snapshot == answer.lwm


def test_the_newest_version_is_above_the_lwm_held_back_by_the_lagging_partition_and_server(
    history, horizon
):
    key = history.keys["p0"]
    answer = horizon.explain_key("accounts", key)
    [late] = of(answer, "ABOVE_LWM")
    assert json.loads(late.row_json)["seq"] == 3
    assert late.valid_from > answer.lwm
    assert (answer.holder.server, answer.holder.partition) == ("s2", 1)
    assert "partition 1 on server s2" in late.detail
    assert_query_agrees(horizon, answer, key)


def test_an_older_version_is_superseded_by_the_version_committed_when_it_closed(history, horizon):
    key = history.keys["p0"]
    answer = horizon.explain_key("accounts", key)
    [seen] = of(answer, "VISIBLE")
    assert json.loads(seen.row_json)["balance"] == 200
    [old] = [v for v in of(answer, "SUPERSEDED") if v.segment_state == "read"]
    assert old.superseded_by == seen.valid_from == old.valid_until
    assert_query_agrees(horizon, answer, key)


def test_a_deleted_key_shows_its_last_version_deleted_and_the_query_returns_nothing(
    history, horizon
):
    key = history.keys["gone"]
    answer = horizon.explain_key("accounts", key)
    assert of(answer, "VISIBLE") == []
    [gone] = [v for v in of(answer, "DELETED") if v.segment_state == "read"]
    assert not gone.HasField("superseded_by")
    assert "no row" in answer.summary
    assert_query_agrees(horizon, answer, key)


def test_at_an_older_snapshot_a_newer_version_was_written_after_it_by_number_or_token(
    history, horizon
):
    key, first = history.keys["p0"], history.snapshots["first"]
    by_number = horizon.explain_key("accounts", key, at=first)
    by_token = horizon.explain_key("accounts", key, at=tokens.encode({"accounts": first}))
    assert by_number.snapshot == by_token.snapshot == first
    assert by_number.snapshot_source == pb.SNAPSHOT_SOURCE_VERSION
    assert reasons(by_number) == reasons(by_token)
    [later] = [v for v in of(by_number, "WRITTEN_AFTER_SNAPSHOT") if v.segment_state == "read"]
    assert json.loads(later.row_json)["seq"] == 2
    [seen] = of(by_number, "VISIBLE")
    assert json.loads(seen.row_json)["seq"] == 1
    assert_query_agrees(horizon, by_number, key)


def test_copies_in_a_compactions_inputs_name_the_segment_they_were_compacted_into(history, horizon):
    key = history.keys["p1"]
    answer = horizon.explain_key("accounts", key)
    compacted = of(answer, "COMPACTED")
    assert compacted, reasons(answer)
    read = {v.segment_id for v in answer.versions if v.segment_state == "read"}
    for copy in compacted:
        assert copy.segment_state == "overshadowed"
        assert set(copy.compacted_into) == read
    assert_query_agrees(horizon, answer, key)


def test_without_a_compaction_record_the_inputs_are_overshadowed_by_the_group_that_replaced_them(
    history, horizon
):
    key = history.keys["p1"]
    records = history.root / "store" / "accounts" / "_compaction"
    aside = records.with_name("_compaction.collected")
    os.rename(records, aside)  # as once collection has gone through the records
    try:
        answer = horizon.explain_key("accounts", key)
    finally:
        os.rename(aside, records)
    assert of(answer, "COMPACTED") == []
    shadowed = of(answer, "OVERSHADOWED")
    assert shadowed, reasons(answer)
    read = {v.segment_id for v in answer.versions if v.segment_state == "read"}
    assert all(any(segment in v.detail for segment in read) for v in shadowed)
    assert_query_agrees(horizon, answer, key)


def test_a_version_the_retention_horizon_passed_is_dropped_while_stored_and_by_compaction(
    spark, history, horizon
):
    key = history.keys["kept"]
    stored = horizon.explain_key("ledger", key)
    [old] = of(stored, "DROPPED_BY_RETENTION")
    assert old.segment_state == "read" and old.valid_until <= stored.retention_horizon
    assert old.superseded_by == old.valid_until
    assert_query_agrees(horizon, stored, key)
    compact_ledger(spark, history)

    def followed() -> pb.ExplainKeyResponse | None:
        """The answer once the broker follows the compaction (it learns of it asynchronously)."""
        answer = horizon.explain_key("ledger", key)
        return None if old.segment_id in segments_read(answer) else answer

    compacted = eventually(followed, "the broker follows the ledger's compaction")
    [dropped] = of(compacted, "DROPPED_BY_RETENTION")
    assert dropped.segment_state == "overshadowed" and dropped.compacted_into
    assert "which dropped this version" in dropped.detail
    assert all(v.valid_from != dropped.valid_from for v in compacted.versions
               if v.segment_state == "read")  # fmt: skip
    assert_query_agrees(horizon, compacted, key)


def test_a_segment_found_unreadable_is_named_and_its_version_incomplete_leaves_the_other_standby(
    history, horizon
):
    at = history.snapshots["orders_at"]
    key_a, key_b = history.keys["a"], history.keys["b"]
    files = {str(s.id): s.location for s in history.orders_outputs}
    before = horizon.explain_key("orders", key_a, at=at)
    [seen] = of(before, "VISIBLE")
    lost_id = seen.segment_id
    assert lost_id in files

    def query() -> None:
        assert_query_agrees(horizon, before, key_a)

    break_and_restore(seen.file, query)  # the broker finds the file missing, marks the segment
    answer = horizon.explain_key("orders", key_a, at=at)
    [unreadable] = of(answer, "UNREADABLE_SEGMENT")
    assert unreadable.segment_id == lost_id
    [fallen_back] = of(answer, "VISIBLE")  # the older version's copy is read again
    assert fallen_back.segment_id != lost_id
    assert json.loads(fallen_back.row_json) == json.loads(seen.row_json)
    assert_query_agrees(horizon, answer, key_a)
    other = horizon.explain_key("orders", key_b, at=at)
    standby = of(other, "STANDBY")
    assert standby and "not complete" in standby[0].detail, reasons(other)
    assert_query_agrees(horizon, other, key_b)


def test_a_file_that_cannot_be_read_for_the_key_is_listed_not_skipped(history, horizon):
    key = history.keys["p1"]
    answer = horizon.explain_key("accounts", key)
    [copy] = of(answer, "VISIBLE")
    path = copy.file.removeprefix("file:")
    os.rename(path, path + ".gone")
    try:
        missing = horizon.explain_key("accounts", key)
    finally:
        os.rename(path + ".gone", path)
    [lost] = missing.not_listed
    assert lost.segment.id == copy.segment_id and path in lost.reason
    assert all(v.file != copy.file for v in missing.versions)

    # the segment's other files are still read
    def copies(found: pb.ExplainKeyResponse) -> list[tuple[int, str]]:
        return [(v.valid_from, v.file) for v in found.versions if v.segment_id == copy.segment_id]

    assert copies(missing) == [item for item in copies(answer) if item[1] != copy.file]


@pytest.mark.parametrize(
    ("table", "key", "at", "error", "words"),
    [
        ("nosuch", "k", None, NotFound, "nosuch"),
        ("accounts", '{"id": 1}', None, InvalidArgument, "missing user_id"),
        ("accounts", "[1]", None, InvalidArgument, "key column user_id is string"),
        ("accounts", "k00", "soon", InvalidArgument, "a number (an HLC) or a snapshot token"),
        ("accounts", "k00", tokens.encode({"other": 5}), InvalidArgument, "names no snapshot"),
        ("accounts", "k00", str(2**62), FailedPrecondition, "above the low-watermark"),
        ("ledger", "L1", "1", FailedPrecondition, "below the retention horizon"),
    ],
)
def test_bad_requests_are_refused_with_their_status_naming_the_problem(
    horizon, table, key, at, error, words
):
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        horizon.explain_key(table, key, at=at)


def test_the_caller_needs_the_inspect_grant_and_the_right_to_read_the_table(history):
    with (
        connect(history.target, token=NO_INSPECT) as blind,
        pytest.raises(PermissionDenied, match="may not inspect"),
    ):
        blind.explain_key("accounts", history.keys["p0"])
    with connect(history.target, token=READER) as reader:
        assert reader.explain_key("accounts", history.keys["p0"]).versions
        with pytest.raises(PermissionDenied, match="may not read"):
            reader.explain_key("ledger", "L1")


def test_horizon_why_prints_every_version_with_its_verdict_and_the_summary(
    history, horizon, capsys, monkeypatch
):
    monkeypatch.setenv("COLUMNS", "400")
    key = history.keys["p0"]
    argv = ["why", "accounts", key, "--target", history.target, "--token", ADMIN]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    answer = horizon.explain_key("accounts", key)
    assert f"snapshot {answer.snapshot} (no snapshot clause" in printed
    assert "held back by server s2 partition 1" in printed
    for verdict in ("above lwm", "visible", "superseded", "compacted"):
        assert verdict in printed, printed
    assert answer.summary in " ".join(printed.split())
    assert cli.main([*argv, "--json", "--at", str(history.snapshots["first"])]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["snapshot"] == history.snapshots["first"]
    assert {v["reason"] for v in shown["versions"]} >= {
        "KEY_VERSION_REASON_VISIBLE",
        "KEY_VERSION_REASON_WRITTEN_AFTER_SNAPSHOT",
    }


def test_horizon_why_refuses_a_malformed_key_with_the_status_and_the_column(history, capsys):
    argv = ["why", "accounts", "[1]", "--target", history.target, "--token", ADMIN]
    assert cli.main(argv) == 1
    assert "key column user_id is string" in capsys.readouterr().err


def _console(history: History) -> ConsoleHttp:
    assert history.broker.console is not None
    return ConsoleHttp(history.broker.console.url)


def test_the_console_page_lists_the_versions_and_their_verdicts(history, horizon):
    key = history.keys["p0"]
    page = _console(history).request(
        "GET", f"/tables/accounts/why?key={key}", headers={"Authorization": f"Bearer {ADMIN}"}
    )
    assert page.status == 200, page.text
    answer = horizon.explain_key("accounts", key)
    shown = re.findall(r'data-reason="([^"]+)"', page.text)
    assert shown == [
        pb.KeyVersionReason.Name(v.reason)
        .removeprefix("KEY_VERSION_REASON_")
        .lower()
        .replace("_", " ")
        for v in answer.versions
    ]
    assert f'<b id="snapshot">{answer.snapshot}</b>' in page.text
    assert html.escape(answer.summary, quote=False) in page.text


def test_the_console_page_answers_a_malformed_key_with_400_naming_the_column(history):
    page = _console(history).request(
        "GET", "/tables/accounts/why?key=%5B1%5D", headers={"Authorization": f"Bearer {ADMIN}"}
    )
    assert page.status == 400
    assert "key column user_id is string" in page.text


def test_in_a_real_browser_the_form_on_the_table_page_explains_a_key(history):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from tests.observe.browser import start_chromium

    key = history.keys["gone"]
    base = history.broker.console.url.rstrip("/")  # type: ignore[union-attr]
    browser = start_chromium()
    try:
        browser.get(base + "/login")
        browser.find_element(By.ID, "token").send_keys(ADMIN)
        browser.find_element(By.CSS_SELECTOR, "#login button").click()
        WebDriverWait(browser, 30).until(lambda b: b.find_elements(By.ID, "identity"))
        browser.get(base + "/tables/accounts")
        browser.find_element(By.CSS_SELECTOR, "#why input[name=key]").send_keys(key)
        browser.find_element(By.CSS_SELECTOR, "#why button").click()
        WebDriverWait(browser, 30).until(lambda b: b.find_elements(By.ID, "why-summary"))
        assert "no row" in browser.find_element(By.ID, "why-summary").text
        verdicts = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#versions .verdict")]
        assert "deleted" in verdicts and "visible" not in verdicts
    finally:
        browser.quit()
