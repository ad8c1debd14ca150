"""Reading a kubeconfig and the in-cluster service account as client-go reads them, and the
credentials each gives (app/sources/kube/kubeconfig.py, credentials.py). What the API server
makes of them is tests/kube/test_kube_client.py's."""

from __future__ import annotations

import asyncio
import base64
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import trustme
import yaml

from app.sources.kube.client import KubeClient
from app.sources.kube.credentials import CredentialsError, ExecPlugin, NoToken, StaticToken, TokenFile
from app.sources.kube.kubeconfig import ClusterAccess, KubeConfigError, Trust, from_kubeconfig, in_cluster


def _write(tmp_path: Path, user: dict[str, Any], cluster: dict[str, Any] | None = None) -> Path:
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": cluster or {"server": "https://10.0.0.1:6443"}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    }))  # fmt: skip
    return path


def test_a_token_file_takes_precedence_over_a_token_and_is_relative_to_the_kubeconfig(tmp_path: Path) -> None:
    access = from_kubeconfig(_write(tmp_path, {"token": "inline", "tokenFile": "secrets/token"}))
    assert access.server == "https://10.0.0.1:6443"
    assert isinstance(access.credentials, TokenFile)
    assert access.credentials.path == tmp_path / "secrets" / "token"
    assert from_kubeconfig(_write(tmp_path, {"token": "inline"})).credentials == StaticToken("inline")
    assert isinstance(from_kubeconfig(_write(tmp_path, {})).credentials, NoToken)


def test_cluster_fields_are_carried(tmp_path: Path) -> None:
    cluster = {
        "server": "https://api.example:443/",
        "tls-server-name": "kubernetes.default.svc",
        "proxy-url": "http://proxy.example:3128",
        "insecure-skip-tls-verify": True,
    }
    access = from_kubeconfig(_write(tmp_path, {"token": "t"}, cluster))
    assert (access.server, access.tls_server_name, access.proxy) == (
        "https://api.example:443",
        "kubernetes.default.svc",
        "http://proxy.example:3128",
    )
    context = access.trust.context()
    assert context.verify_mode.name == "CERT_NONE" and not context.check_hostname


@pytest.mark.parametrize(
    ("user", "cluster", "error"),
    [
        ({"auth-provider": {"name": "gcp"}}, None, "user.auth-provider: not supported: .*exec plugin"),
        ({"username": "admin", "password": "x"}, None, "user.username: not supported: .*basic authentication"),
        ({"client-certificate": "/no/tls.crt", "client-key": "/no/k"}, None, "user.client-certificate /no/tls.crt: No"),
        ({"client-key-data": "AAAA"}, None, "user.client-certificate and user.client-key go together"),
        ({"client-certificate-data": "x!", "client-key-data": "AA"}, None, "user.client-certificate-data is not b"),
        ({}, {"server": "10.0.0.1:6443"}, "cluster.server '10.0.0.1:6443' is not an http"),
        ({}, {"server": "https://h", "certificate-authority-data": "bm90"}, "cluster.certificate-authority: "),
        ({"exec": {"command": "kubelogin"}}, None, "user.exec.apiVersion '' is not one of"),
        ({"exec": {"apiVersion": "client.authentication.k8s.io/v1"}}, None, "user.exec.command is not set"),
        (
            {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "x", "interactiveMode": "Always"}},
            None,
            "user.exec.interactiveMode Always",
        ),
    ],
)  # fmt: skip
def test_what_cannot_be_used_is_named(
    tmp_path: Path, user: dict[str, Any], cluster: dict[str, Any] | None, error: str
) -> None:
    with pytest.raises(KubeConfigError, match=f"kubeconfig {tmp_path}/config, context c: {error}"):
        from_kubeconfig(_write(tmp_path, user, cluster))


def test_a_kubeconfig_without_a_current_context_or_its_parts_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "config"
    with pytest.raises(KubeConfigError, match="no such file"):
        from_kubeconfig(path)
    path.write_text("clusters: []\n")
    with pytest.raises(KubeConfigError, match="current-context is not set"):
        from_kubeconfig(path)
    path.write_text(yaml.safe_dump({"current-context": "c", "contexts": [{"name": "c", "context": {"cluster": "k"}}]}))
    with pytest.raises(KubeConfigError, match="no cluster named 'k' in clusters"):
        from_kubeconfig(path)
    path.write_text("[unclosed\n")
    with pytest.raises(KubeConfigError, match="not YAML"):
        from_kubeconfig(path)


def test_client_certificates_load_from_data_and_from_files(tmp_path: Path) -> None:
    ca = trustme.CA()
    leaf = ca.issue_cert("pilotfish@example")
    (tmp_path / "pki").mkdir()
    leaf.cert_chain_pems[0].write_to_path(str(tmp_path / "pki" / "tls.crt"))
    leaf.private_key_pem.write_to_path(str(tmp_path / "pki" / "tls.key"))
    files = {"client-certificate": "pki/tls.crt", "client-key": "pki/tls.key"}
    from_kubeconfig(_write(tmp_path, files))  # relative to the kubeconfig: loads
    other = trustme.CA().issue_cert("other@example")
    mismatched = {"client-certificate": "pki/tls.crt", "client-key-data": _b64(other.private_key_pem.bytes())}
    with pytest.raises(KubeConfigError, match=r"user\.client-certificate / user\.client-key"):
        from_kubeconfig(_write(tmp_path, mismatched))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_exec_plugin_fields(tmp_path: Path) -> None:
    plugin = {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "command": "bin/auth",
        "args": ["token", "--x"],
        "env": [{"name": "A", "value": "1"}],
        "installHint": "install auth",
        "provideClusterInfo": True,
    }
    cluster = {"server": "https://h:6443", "certificate-authority-data": _b64(trustme.CA().cert_pem.bytes())}
    credentials = from_kubeconfig(_write(tmp_path, {"exec": plugin}, cluster)).credentials
    assert isinstance(credentials, ExecPlugin)
    assert credentials.command == str(tmp_path / "bin" / "auth")  # relative with a slash: the kubeconfig's dir
    assert (credentials.args, dict(credentials.env), credentials.api_version) == (
        ("token", "--x"),
        {"A": "1"},
        "client.authentication.k8s.io/v1beta1",
    )
    assert credentials.cluster is not None and credentials.cluster["server"] == "https://h:6443"
    assert "certificate-authority-data" in credentials.cluster


def test_in_cluster_reads_the_service_account(tmp_path: Path) -> None:
    with pytest.raises(KubeConfigError, match="KUBERNETES_SERVICE_HOST and _PORT are not set"):
        in_cluster({}, tmp_path)
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    with pytest.raises(KubeConfigError, match=f"{tmp_path}/token: no such file"):
        in_cluster(env, tmp_path)
    (tmp_path / "token").write_text("jwt")
    trustme.CA().cert_pem.write_to_path(str(tmp_path / "ca.crt"))
    access = in_cluster(env, tmp_path)
    assert access.server == "https://[fd00::1]:443"
    assert access.credentials == TokenFile(tmp_path / "token")


async def test_a_token_file_is_read_once_a_minute_and_kept_while_it_is_missing(tmp_path: Path) -> None:
    now = [0.0]
    path = tmp_path / "token"
    path.write_text("one\n")
    token = TokenFile(path, clock=lambda: now[0])
    assert await token.authorization() == "Bearer one"
    path.write_text("two")
    now[0] = 59.0
    assert await token.authorization() == "Bearer one"
    now[0] = 60.0
    assert await token.authorization() == "Bearer two"
    path.unlink()
    now[0] = 200.0
    assert await token.authorization() == "Bearer two"  # client-go keeps the last token read
    with pytest.raises(CredentialsError, match=r"(?i)no such file"):
        await TokenFile(path).authorization()
    path.write_text("")
    with pytest.raises(CredentialsError, match="is empty"):
        await TokenFile(path).authorization()


def _script(tmp_path: Path, body: str) -> ExecPlugin:
    script = tmp_path / "plugin.py"
    script.write_text(body)
    return ExecPlugin(sys.executable, (str(script),), {"GREETING": "hi"})


def _credential(status: dict[str, Any], api_version: str = "client.authentication.k8s.io/v1") -> str:
    return json.dumps({"apiVersion": api_version, "kind": "ExecCredential", "status": status})


async def test_an_exec_plugin_runs_once_for_concurrent_requests_with_its_env(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    plugin = _script(
        tmp_path,
        "import os, sys, time\n"
        f"open({str(runs)!r}, 'a').write(os.environ['GREETING'] + '\\n')\n"
        "time.sleep(0.2)\n"
        f"sys.stdout.write({_credential({'token': 'jwt'})!r})\n",
    )
    assert set(await asyncio.gather(*(plugin.authorization() for _ in range(5)))) == {"Bearer jwt"}
    assert runs.read_text() == "hi\n"


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ("import sys; sys.stderr.write('login first'); sys.exit(3)", "exited 3: login first"),
        ("print('token: x')", "its output is not an ExecCredential"),
        (f"print({_credential({'token': 't'}, 'client.authentication.k8s.io/v1beta1')!r})", "answered apiVersion"),
        (f"print({_credential({'clientCertificateData': 'PEM'})!r})", "clientCertificateData and clientKeyData go"),
        (f"print({_credential({})!r})", "has no token and no client certificate"),
        (f"print({_credential({'token': 't', 'expirationTimestamp': 'soon'})!r})", "'soon' is not RFC 3339"),
    ],
)  # fmt: skip
async def test_an_exec_plugin_s_failure_is_named(tmp_path: Path, body: str, error: str) -> None:
    with pytest.raises(CredentialsError, match=f"exec plugin {sys.executable}: .*{error}"):
        await _script(tmp_path, body).authorization()


async def test_an_exec_plugin_that_cannot_run_gives_its_install_hint() -> None:
    plugin = ExecPlugin("/nowhere/kubelogin", install_hint="brew install kubelogin")
    with pytest.raises(CredentialsError, match=r"cannot run it: .*\(brew install kubelogin\)"):
        await plugin.authorization()


async def test_an_exec_plugin_s_pair_that_does_not_load_is_named_before_any_connection(tmp_path: Path) -> None:
    plugin = _script(tmp_path, f"print({_credential({'clientCertificateData': 'A', 'clientKeyData': 'B'})!r})")
    client = KubeClient(ClusterAccess("https://127.0.0.1:1", Trust(), plugin))
    with pytest.raises(CredentialsError, match=f"exec plugin {sys.executable}: the client certificate and key do not"):
        await client.request("GET", "/api")
    await client.close()
