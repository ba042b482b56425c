"""Certificates a test makes (a CA, a server certificate for 127.0.0.1/localhost, client
certificates) and a TLS-terminating proxy for Triton's HTTP endpoint, which has no TLS of its
own (Triton's docs: put a proxy in front of it)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Certs:
    ca: Path              # the CA that signed server and client
    server: Pair          # CN/SAN: localhost, 127.0.0.1
    client: Pair          # signed by ca
    other_ca: Path        # a CA that signed nothing here
    stranger: Pair        # a client certificate signed by other_ca


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write(path: Path, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> Pair:
    path.with_suffix(".key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    path.with_suffix(".pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return Pair(path.with_suffix(".pem"), path.with_suffix(".key"))


def _cert(subject: str, key: ec.EllipticCurvePrivateKey, issuer: str,
          issuer_key: ec.EllipticCurvePrivateKey, *, ca: bool = False,
          server: bool = False) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(_name(issuer))
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False).add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    elif not ca:
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def make_certs(folder: Path) -> Certs:
    folder.mkdir(parents=True, exist_ok=True)
    keys = {n: ec.generate_private_key(ec.SECP256R1())
            for n in ("ca", "server", "client", "other", "stranger")}
    ca = _write(folder / "ca", keys["ca"], _cert("test-ca", keys["ca"], "test-ca", keys["ca"],
                                                 ca=True))
    other = _write(folder / "other-ca", keys["other"],
                   _cert("other-ca", keys["other"], "other-ca", keys["other"], ca=True))
    server = _write(folder / "server", keys["server"],
                    _cert("localhost", keys["server"], "test-ca", keys["ca"], server=True))
    client = _write(folder / "client", keys["client"],
                    _cert("client", keys["client"], "test-ca", keys["ca"]))
    stranger = _write(folder / "stranger", keys["stranger"],
                      _cert("stranger", keys["stranger"], "other-ca", keys["other"]))
    return Certs(ca.cert, server, client, other.cert, stranger)


def triton_tls_args(certs: Certs, mutual: bool) -> tuple[str, ...]:
    """tritonserver flags for TLS on its gRPC endpoint (one-way, or mutual)."""
    args = ("--grpc-use-ssl=true", f"--grpc-server-cert={certs.server.cert}",
            f"--grpc-server-key={certs.server.key}", f"--grpc-root-cert={certs.ca}")
    return (*args, "--grpc-use-ssl-mutual=true") if mutual else args


class TlsProxy:
    """``https://127.0.0.1:<port>`` in front of a plain HTTP port, in a thread of its own;
    ``seen`` keeps the first bytes of every connection the client sent (to find headers)."""

    def __init__(self, target_port: int, certs: Certs) -> None:
        self.target_port = target_port
        self.ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.ctx.load_cert_chain(str(certs.server.cert), str(certs.server.key))
        self.seen: list[bytes] = []
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._writers: list[asyncio.StreamWriter] = []

    def __enter__(self) -> TlsProxy:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(
            self._handle, "127.0.0.1", 0, ssl=self.ctx))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        server.close()
        tasks = asyncio.all_tasks(self._loop)
        for task in tasks:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        self._loop.run_until_complete(server.wait_closed())
        for w in self._writers:
            w.close()
        self._loop.run_until_complete(asyncio.sleep(0))
        self._loop.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        self._writers += [writer, up_w]
        first = True

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter,
                       record: bool) -> None:
            nonlocal first
            with contextlib.suppress(Exception):
                while data := await src.read(65536):
                    if record and first:
                        self.seen.append(data[:4096])
                        first = False
                    dst.write(data)
                    await dst.drain()
            with contextlib.suppress(Exception):
                dst.close()

        await asyncio.gather(pump(reader, up_w, True), pump(up_r, writer, False))
