"""Safe defaults and no leaks: no anonymous service off loopback, grants checked before any
table-specific answer, announced files confined to the table's storage root, client
certificates as identities (mutual TLS), and reflection only when configured."""

from __future__ import annotations

import time
from pathlib import Path

import grpc
import pytest
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from horizon_broker._core.errors import (
    FailedPrecondition,
    PermissionDenied,
    Unauthenticated,
    Unavailable,
)
from horizon_broker.broker.api.server import BrokerServer
from horizon_broker.broker.config import config_from_mapping
from horizon_broker.client import connect
from horizon_broker.timeline.segment import Segment
from tests.broker.conftest import ADMIN, LWM, READER, broker_config
from tests.broker.data import CHUNK, VERSION, descriptor, write_rows
from tests.broker.spark_jobs import ExtraBroker
from tests.certificates import mutual_tls_certificates, mutual_tls_server


def test_a_broker_reachable_from_other_machines_needs_identities():
    anonymous = config_from_mapping(
        {"server": {"listen": "0.0.0.0:0", "allow_insecure_remote": True}}
    )
    with pytest.raises(FailedPrecondition, match="without identities"):
        BrokerServer(anonymous).start()


@pytest.mark.parametrize(
    "template",
    [
        "SELECT * FROM {t}",
        "SELECT * FROM {t} VERSION AS OF 999999999999",
        "SELECT * FROM accounts a JOIN {t} b ON a.id = b.id",
        "SELECT * FROM table_changes('{t}', 0)",
        "WITH x AS (SELECT * FROM default.{t}) SELECT * FROM x",
    ],
)
def test_an_ungranted_table_and_an_unknown_one_answer_alike(broker_env, template):
    answers = []
    with connect(broker_env.target, token=READER) as reader:
        for table in ("secret", "no_such_table"):
            with pytest.raises(PermissionDenied) as refused:
                reader.query(template.format(t=table))
            answers.append(str(refused.value).replace(table, "<t>"))
    assert answers[0] == answers[1]
    assert str(LWM) not in answers[0]  # nothing about the ungranted table's state


def test_inspection_of_an_ungranted_table_and_an_unknown_one_answer_alike(broker_env):
    with connect(broker_env.target, token=READER) as reader:
        answers = []
        for table in ("secret", "no_such_table"):
            for call in (reader.timeline, reader.watermarks, reader.locks):
                with pytest.raises(PermissionDenied) as refused:
                    call(table)
                answers.append((call.__name__, str(refused.value).replace(table, "<t>")))
    assert answers[:3] == answers[3:]


def test_a_segment_announced_outside_the_tables_storage_root_is_refused(
    broker_env, client, tmp_path
):
    name = "confined"
    root = Path(broker_env.root) / name
    desc = descriptor(name, storage_root=root)
    rows = [
        {"id": i, "owner": "o", "balance": i, "validFrom": 500, "validUntil": None}
        for i in range(5)
    ]
    inside = write_rows(root / "p0.parquet", desc, rows)
    outside = write_rows(tmp_path / "elsewhere.parquet", desc, rows)  # a real, readable file
    segments = [
        Segment(table=name, interval=CHUNK, version=VERSION, partition=p, core_partitions=2,
                location=(path,), row_count=5)
        for p, path in enumerate((inside, outside))
    ]  # fmt: skip
    server = broker_env.server_client
    server.register_table(desc)
    server.announce(segments)
    server.report(name, {0: (LWM, LWM)})
    follower = broker_env.broker.follower

    def refused_here() -> list[tuple[tuple[str, ...], str]]:
        # other tests of the shared broker leave unreadable segments of their own tables
        return [(s.location, m.reason) for s, m in follower.unreadable() if s.table == name]

    def followed(f: object) -> bool:
        # the refusal and the report arrive separately: a query before the LWM is (rightly)
        # FAILED_PRECONDITION, not the refusal this test is about
        return bool(refused_here()) and follower.view(name).lwm == LWM

    assert follower.wait_for(followed, 20)
    refused = refused_here()
    assert refused and refused[0][0] == (outside,)
    assert "outside the table's storage root" in refused[0][1]
    with pytest.raises(Unavailable):  # the chunk is incomplete without it: never a silent answer
        client.query(f"SELECT count(*) FROM {name}", cache=False)
    listed = client.timeline(name).unreadable
    assert [u.segment.location for u in listed] == [[outside]]
    time.sleep(1.5)  # several rechecks ([state].unreadable_recheck_s = 0.5): it stays refused
    assert [location for location, _ in refused_here()] == [(outside,)]


def test_a_client_certificate_is_an_identity_with_its_grants(broker_env, spark, tmp_path):
    certs = mutual_tls_certificates(tmp_path)
    config = broker_config(
        broker_env.redis.url,
        server=mutual_tls_server(certs),
        tokens=[
            {"name": "admin", "token": ADMIN, "tables": ["*"], "inspect": True},
            {"name": "svc-a", "client_cn": "svc-a", "tables": ["accounts"]},
        ],
    )
    with ExtraBroker(config, spark, broker_env) as server:
        target = f"localhost:{server.port}"
        identity = (certs["client_key"], certs["client"])
        with connect(target, root_certificates=certs["ca"], client_certificate=identity) as svc:
            assert svc.query("SELECT count(*) AS n FROM accounts").to_pylist() == [{"n": 100}]
            with pytest.raises(PermissionDenied, match="svc-a"):
                svc.query("SELECT * FROM secret")
        with (
            connect(
                target, ADMIN, root_certificates=certs["ca"], client_certificate=identity
            ) as admin,
        ):
            assert admin.query("SELECT count(*) AS n FROM secret").num_rows == 1  # the token wins
        with (
            connect(target, root_certificates=certs["ca"], timeout=5) as stranger,
            pytest.raises((Unauthenticated, Unavailable)),  # no certificate: no handshake
        ):
            stranger.query("SELECT 1")


def test_reflection_is_off_by_default_and_served_only_when_configured(broker_env, spark):
    """Reflection answers before any token is checked: by default it describes nothing."""

    def services(target: str) -> list[str]:
        with grpc.insecure_channel(target) as channel:
            stub = reflection_pb2_grpc.ServerReflectionStub(channel)
            request = reflection_pb2.ServerReflectionRequest(list_services="")
            reply = next(stub.ServerReflectionInfo(iter([request]), timeout=5))
            return [s.name for s in reply.list_services_response.service]

    with pytest.raises(grpc.RpcError) as refused:
        services(broker_env.target)  # the defaults
    assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED
    config = broker_config(broker_env.redis.url, server={"reflection": True})
    with ExtraBroker(config, spark, broker_env) as server:
        listed = set(services(server.target))
        assert {"horizon.v1.QueryService", "horizon.v1.InspectionService"} <= listed
        assert "grpc.health.v1.Health" in listed
        with grpc.insecure_channel(server.target) as channel:
            found = ProtoReflectionDescriptorDatabase(channel).FindFileContainingSymbol(
                "horizon.v1.QueryService"
            )
        assert "ExecuteQuery" in {m.name for m in found.service[0].method}
