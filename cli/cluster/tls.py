"""The Dask network's credentials: mutual TLS under an authority of the cluster's own.

Dask has no passwords, and whoever reaches a scheduler can run code on its workers. So the
cluster's scheduler listens on ``tls://`` only, and the scheduler, its workers and every client
each show a certificate that the cluster's own authority signed and check the other side's: a
connection without one, or with one from another authority, is refused in the handshake
(Dask's ``Security``; ``distributed.comm.require-encryption``, which also keeps a client from
falling back to plain ``tcp://``).

The first ``up`` makes the authority and two members' certificates: the servers' in ``DIR/tls``
(root's, readable by the servers' user, which runs the scheduler) and the project owner's in
``DIR/owner`` (that user's only: its flows and Dask workers show it), so neither reads the
other's key. The authority's key is dropped once it has signed, so nothing in the folder can
make another member. A later ``up`` keeps them while they have a day left (they last a
year), else makes new ones.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Iterable
from pathlib import Path

from cli.cluster.folder import make_private, write_private
from cli.cluster.layout import Cluster
from cli.cluster.users import Account

VALID_DAYS = 365


def make_certificates(
    cluster: Cluster,
    addresses: Iterable[str],
    service: Account | None = None,
    owner: Account | None = None,
) -> None:
    """The authority and the members' certificates (for ``addresses``), unless valid ones are
    already there: the servers' readable by ``service``'s group, the owner's ``owner``'s own
    (both root's only when not given)."""
    from cryptography import x509

    now = datetime.datetime.now(datetime.UTC)
    files = (*cluster.tls_files(), *cluster.owner_tls_files())
    if all(p.is_file() for p in files):
        member = x509.load_pem_x509_certificate(cluster.tls_files()[1].read_bytes())
        if member.not_valid_after_utc > now + datetime.timedelta(days=1):
            _give(cluster, service, owner)
            return
    ca, members = _sign(addresses, now, count=2)
    make_private(cluster.tls)
    make_private(cluster.owner_home)
    for (ca_file, cert_file, key_file), (cert, key) in zip(
        (cluster.tls_files(), cluster.owner_tls_files()), members, strict=True
    ):
        write_private(key_file, key)
        write_private(cert_file, cert)
        write_private(ca_file, ca)
    _give(cluster, service, owner)


def _give(cluster: Cluster, service: Account | None, owner: Account | None) -> None:
    """The servers' files to root and ``service``'s group (read only), the owner's to
    ``owner``."""
    if service is not None:
        os.chown(cluster.tls, 0, service.gid, follow_symlinks=False)
        cluster.tls.chmod(0o750)
        for path in cluster.tls_files():
            os.chown(path, 0, service.gid, follow_symlinks=False)
            os.chmod(path, 0o640, follow_symlinks=False)
    if owner is not None:
        for path in cluster.owner_tls_files():
            os.chown(path, owner.uid, owner.gid, follow_symlinks=False)


def _sign(
    addresses: Iterable[str], now: datetime.datetime, count: int
) -> tuple[str, list[tuple[str, str]]]:
    """A new authority's certificate and ``count`` members' (certificate, key), in PEM."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    def name(common: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])

    def builder(subject: str, issuer: str, key) -> x509.CertificateBuilder:
        return (
            x509.CertificateBuilder()
            .subject_name(name(subject))
            .issuer_name(name(issuer))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        )

    authority = "tabula cluster authority"
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        builder(authority, authority, ca_key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(x509, key_cert_sign=True, crl_sign=True), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    usages = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    ips = [x509.IPAddress(ipaddress.ip_address(a)) for a in addresses]
    pem = serialization.Encoding.PEM
    members = []
    for _ in range(count):
        member_key = ec.generate_private_key(ec.SECP256R1())
        member = (
            builder("tabula cluster member", authority, member_key)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(x509, digital_signature=True), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(x509.SubjectAlternativeName(ips), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
            )
            .sign(ca_key, hashes.SHA256())
        )
        key_bytes = member_key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        members.append((member.public_bytes(pem).decode(), key_bytes.decode()))
    return ca.public_bytes(pem).decode(), members


def _key_usage(x509, **allowed: bool):
    names = ("digital_signature", "content_commitment", "key_encipherment",
             "data_encipherment", "key_agreement", "key_cert_sign", "crl_sign", "encipher_only",
             "decipher_only")  # fmt: skip
    return x509.KeyUsage(**{n: allowed.get(n, False) for n in names})


def cli_args(files: tuple[Path, Path, Path]) -> list[str]:
    """The TLS options of ``dask scheduler`` and ``dask worker`` that show ``files`` (the
    authority's certificate, the member's certificate and key)."""
    ca, cert, key = files
    return ["--protocol", "tls", "--tls-ca-file", str(ca), "--tls-cert", str(cert),
            "--tls-key", str(key)]  # fmt: skip


def security(cluster: Cluster):
    """A Dask client's credentials for this cluster (`distributed.Security`)."""
    from distributed import Security

    ca, cert, key = cluster.tls_files()
    return Security(tls_ca_file=str(ca), tls_client_cert=str(cert), tls_client_key=str(key),
                    require_encryption=True)  # fmt: skip
