"""Certificates for TLS tests, made with the openssl command."""

from __future__ import annotations

import subprocess
from pathlib import Path


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def mutual_tls_certificates(directory: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate (CN svc-a), all
    signed by the CA."""
    paths = {n: directory / f"{n}.pem" for n in ("ca", "ca_key", "server", "server_key",
                                                   "client", "client_key")}  # fmt: skip
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test-ca",
             "-keyout", str(paths["ca_key"]), "-out", str(paths["ca"]))  # fmt: skip
    extensions = directory / "san.cnf"
    extensions.write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for who, subject in (("server", "/CN=localhost"), ("client", "/CN=svc-a")):
        request = directory / f"{who}.csr"
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject,
                 "-keyout", str(paths[f"{who}_key"]), "-out", str(request))  # fmt: skip
        _openssl("x509", "-req", "-in", str(request), "-CA", str(paths["ca"]),
                 "-CAkey", str(paths["ca_key"]), "-CAcreateserial", "-days", "1",
                 "-extfile", str(extensions), "-out", str(paths[who]))  # fmt: skip
    return paths


def mutual_tls_server(certs: dict[str, Path]) -> dict[str, str]:
    """A ``[server]`` section serving TLS with ``certs``' server certificate and requiring
    client certificates the CA signed."""
    return {
        "listen": "127.0.0.1:0",
        "tls_cert": str(certs["server"]),
        "tls_key": str(certs["server_key"]),
        "tls_client_ca": str(certs["ca"]),
    }
