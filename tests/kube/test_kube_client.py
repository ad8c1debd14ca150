"""pilotfish's Kubernetes client (app/sources/kube/client.py) against a real kube-apiserver, with
each way a kubeconfig or a pod authenticates: inline client-certificate data, a token file that
rotates under it, an exec plugin (a real program printing an ExecCredential), the in-cluster
service account, and ``tls-server-name``. Parsing mistakes are tests/unit/test_kubeconfig.py's."""

from __future__ import annotations

import asyncio
import base64
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.sources.kube.client import ApiCallError, KubeClient, api_client
from app.sources.kube.kubeconfig import in_cluster
from tests.support.cluster import Cluster


def _kubeconfig(path: Path, cluster: dict[str, Any], user: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    }))  # fmt: skip
    return path


def _cluster(kube: Cluster, **extra: Any) -> dict[str, Any]:
    return {"server": kube.server, "certificate-authority": str(kube.ca_file), **extra}


async def _whoami(client: KubeClient) -> str:
    """The user the API server takes the client for (a SelfSubjectReview)."""
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    try:
        review = await client.call("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", body)
    finally:
        await client.close()
    return str(review["status"]["userInfo"]["username"])


async def test_inline_client_certificate_data_is_the_admin(tmp_path: Path, kube: Cluster) -> None:
    admin = yaml.safe_load(kube.admin_kubeconfig.read_text())["users"][0]["user"]

    def data(file: str) -> str:
        return base64.b64encode(Path(file).read_bytes()).decode()

    user = {"client-certificate-data": data(admin["client-certificate"]), "client-key-data": data(admin["client-key"])}
    cluster = {"server": kube.server, "certificate-authority-data": data(str(kube.ca_file))}
    assert await _whoami(api_client(_kubeconfig(tmp_path / "config", cluster, user))) == "admin"


async def test_a_token_file_is_read_again_after_its_token_is_refused(tmp_path: Path, kube: Cluster) -> None:
    ns = kube.namespace("rotate")
    kube.service_account(ns, "pilotfish")
    token = tmp_path / "token"
    token.write_text(kube.token(ns, "pilotfish", audiences=["elsewhere"]))  # not one the API server takes
    client = api_client(_kubeconfig(tmp_path / "config", _cluster(kube), {"tokenFile": "token"}))  # relative
    try:
        with pytest.raises(ApiCallError) as refused:
            await _whoami(client)
        assert refused.value.status == 401
        token.write_text(kube.token(ns, "pilotfish"))  # as the kubelet rotates a projected token
        # read again at once after the 401, not a minute after the last read
        assert await _whoami(client) == f"system:serviceaccount:{ns}:pilotfish"
    finally:
        await client.close()


def _plugin(tmp_path: Path, expires: str | None) -> Path:
    """An exec plugin printing the token in ``token``, and what it was asked in ``runs``."""
    status: dict[str, str] = {}
    if expires:
        status["expirationTimestamp"] = expires
    credential = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": status}
    script = tmp_path / "plugin.py"
    script.write_text(
        "import json, os, sys\n"
        f"open({str(tmp_path / 'runs')!r}, 'a').write(os.environ['KUBERNETES_EXEC_INFO'] + '\\n')\n"
        f"credential = {credential!r}\n"
        f"credential['status']['token'] = open({str(tmp_path / 'token')!r}).read()\n"
        "sys.stdout.write(json.dumps(credential))\n"
    )
    return script


@pytest.mark.parametrize(("expires", "runs"), [("2999-01-01T00:00:00Z", 1), ("2001-01-01T00:00:00Z", 3), (None, 1)])
async def test_an_exec_plugin_s_token_is_kept_until_it_expires(
    tmp_path: Path, kube: Cluster, expires: str | None, runs: int
) -> None:
    ns = kube.namespace("exec")
    kube.service_account(ns, "tool")
    (tmp_path / "token").write_text(kube.token(ns, "tool"))
    script = _plugin(tmp_path, expires)
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [str(script)],
            "provideClusterInfo": True,
            "interactiveMode": "Never",
        }
    }
    config = _kubeconfig(tmp_path / "config", _cluster(kube), user)
    for _ in range(3):
        assert await _whoami(api_client(config)) == f"system:serviceaccount:{ns}:tool"
    client = api_client(config)
    try:
        for _ in range(3):
            await client.call("GET", "/api")
    finally:
        await client.close()
    asked = [json.loads(line) for line in (tmp_path / "runs").read_text().splitlines()]
    assert len(asked) == 3 + runs  # one run per new client, and then again only once expired
    assert asked[0]["spec"]["interactive"] is False
    assert asked[0]["spec"]["cluster"]["server"] == kube.server


async def test_an_exec_plugin_is_run_again_after_its_token_is_refused(tmp_path: Path, kube: Cluster) -> None:
    ns = kube.namespace("exec")
    kube.service_account(ns, "tool")
    (tmp_path / "token").write_text(kube.token(ns, "tool", audiences=["elsewhere"]))
    script = _plugin(tmp_path, "2999-01-01T00:00:00Z")
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable, "args": [str(script)]}}
    client = api_client(_kubeconfig(tmp_path / "config", _cluster(kube), user))
    try:
        with pytest.raises(ApiCallError, match="HTTP 401"):
            await client.call("GET", "/api")
        (tmp_path / "token").write_text(kube.token(ns, "tool"))
        assert await _whoami(client) == f"system:serviceaccount:{ns}:tool"  # not kept to its expiry
    finally:
        await client.close()
    assert len((tmp_path / "runs").read_text().splitlines()) == 2


async def test_the_in_cluster_service_account(tmp_path: Path, kube: Cluster) -> None:
    ns = kube.namespace("pod")
    kube.service_account(ns, "pilotfish")
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text(kube.token(ns, "pilotfish"))
    (account / "ca.crt").write_bytes(kube.ca_file.read_bytes())
    host, port = kube.server.removeprefix("https://").rsplit(":", 1)
    access = in_cluster({"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}, account)
    assert await _whoami(KubeClient(access)) == f"system:serviceaccount:{ns}:pilotfish"


async def test_tls_server_name_is_the_name_checked_against_the_server_s_certificate(
    tmp_path: Path, kube: Cluster
) -> None:
    admin = yaml.safe_load(kube.admin_kubeconfig.read_text())["users"][0]["user"]
    named = _kubeconfig(tmp_path / "named", _cluster(kube, **{"tls-server-name": "kubernetes.default.svc"}), admin)
    assert await _whoami(api_client(named)) == "admin"
    # the certificate names 127.0.0.1 too: only the server name given can make this fail
    wrong = _kubeconfig(tmp_path / "wrong", _cluster(kube, **{"tls-server-name": "elsewhere.example"}), admin)
    with pytest.raises(ApiCallError, match=r"elsewhere\.example"):
        await _whoami(api_client(wrong))


async def test_proxy_url_tunnels_to_the_server(tmp_path: Path, kube: Cluster) -> None:
    """An HTTP CONNECT proxy (a real tunnel, bytes relayed both ways) named by ``proxy-url``."""
    asked: list[str] = []

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()

    async def tunnel(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        head = (await client_reader.readuntil(b"\r\n\r\n")).decode()
        method, target, _ = head.split("\r\n", 1)[0].split(" ")
        asked.append(f"{method} {target}")
        host, port = target.rsplit(":", 1)
        server_reader, server_writer = await asyncio.open_connection(host, int(port))
        client_writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await client_writer.drain()
        await asyncio.gather(relay(client_reader, server_writer), relay(server_reader, client_writer))

    proxy = await asyncio.start_server(tunnel, "127.0.0.1", 0)
    port = proxy.sockets[0].getsockname()[1]
    admin = yaml.safe_load(kube.admin_kubeconfig.read_text())["users"][0]["user"]
    config = _kubeconfig(tmp_path / "config", _cluster(kube, **{"proxy-url": f"http://127.0.0.1:{port}"}), admin)
    try:
        assert await _whoami(api_client(config)) == "admin"
    finally:
        proxy.close()
    assert asked == [f"CONNECT {kube.server.removeprefix('https://')}"]


async def test_an_exec_plugin_s_client_certificate_is_presented_and_rotated(tmp_path: Path, kube: Cluster) -> None:
    """A plugin answering with a client certificate (as Teleport's ``tsh`` does): presented on
    the connection; once it expires, the plugin's next one is, on new connections."""
    identities = {}
    manager = kube.ca_file.parent / "controller-manager.kubeconfig"
    for name, config in (("admin", kube.admin_kubeconfig), ("system:kube-controller-manager", manager)):
        written = yaml.safe_load(config.read_text())["users"][0]["user"]
        identities[name] = (written["client-certificate"], written["client-key"])
    current = tmp_path / "current"
    script = tmp_path / "plugin.py"
    script.write_text(
        "import json, sys, pathlib\n"
        f"cert, key = pathlib.Path({str(current)!r}).read_text().split()\n"
        "status = {'clientCertificateData': open(cert).read(), 'clientKeyData': open(key).read(),\n"
        "          'expirationTimestamp': '2001-01-01T00:00:00Z'}\n"  # expired at once: asked again each time
        "sys.stdout.write(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1',\n"
        "                             'kind': 'ExecCredential', 'status': status}))\n"
    )
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable, "args": [str(script)]}}
    client = api_client(_kubeconfig(tmp_path / "config", _cluster(kube), user))
    try:
        for name, (cert, key) in [*identities.items(), *identities.items()]:
            current.write_text(f"{cert} {key}")
            body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
            review = await client.call("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", body)
            assert review["status"]["userInfo"]["username"] == name
    finally:
        await client.close()
