"""Where the API server is and how to reach it, from a kubeconfig file or from the pod's own
service account in a cluster, read as client-go reads them.

A kubeconfig's current context names a cluster (``server``, ``certificate-authority[-data]``,
``insecure-skip-tls-verify``, ``tls-server-name``, ``proxy-url``) and a user (``token``,
``tokenFile``, ``client-certificate[-data]`` / ``client-key[-data]``, ``exec``); relative paths are
relative to the kubeconfig's directory. A user with an ``auth-provider`` or a username and
password is refused by name: client-go deprecated auth providers (it dropped gcp and azure in
1.26; oidc needs the issuer's refresh flow), and API servers stopped taking basic authentication
in 1.19; an exec plugin (kubelogin, gke-gcloud-auth-plugin) is what replaces them.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from app.errors import PilotfishError
from app.sources.kube.credentials import (
    EXEC_API_VERSIONS,
    ClientCertificate,
    Credentials,
    ExecPlugin,
    NoToken,
    StaticToken,
    TokenFile,
    load_client_certificate,
)

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class KubeConfigError(PilotfishError):
    """The kubeconfig (or the in-cluster service account) cannot be used."""


@dataclass(frozen=True)
class Trust:
    """What a TLS context to the API server is made of."""

    ca: bytes | None = None  # PEM; None: the system's roots, as client-go without a CA
    verify: bool = True  # False: insecure-skip-tls-verify
    certificate: ClientCertificate | None = None  # the kubeconfig's own

    def context(self, certificate: ClientCertificate | None = None) -> ssl.SSLContext:
        """A new context presenting ``certificate`` (an exec plugin's), else the kubeconfig's;
        ssl.SSLError or ValueError when the material is not usable."""
        context = ssl.create_default_context(cadata=self.ca.decode() if self.ca is not None else None)
        if not self.verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        chosen = certificate or self.certificate
        if chosen is not None:
            load_client_certificate(context, chosen)
        return context


@dataclass(frozen=True)
class ClusterAccess:
    server: str  # https://HOST:PORT, no trailing slash
    trust: Trust
    credentials: Credentials
    tls_server_name: str | None = None
    proxy: str | None = None


def in_cluster(environ: Mapping[str, str] = os.environ, account: Path = SERVICE_ACCOUNT) -> ClusterAccess:
    """The API server of the cluster pilotfish runs in (``KUBERNETES_SERVICE_HOST`` / ``_PORT``),
    trusted by the service account's ``ca.crt``, as its ``token`` (read again as it rotates)."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST", ""), environ.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise KubeConfigError("the in-cluster service account: KUBERNETES_SERVICE_HOST and _PORT are not set")
    token, ca = account / "token", account / "ca.crt"
    for path in (token, ca):
        if not path.is_file():
            raise KubeConfigError(f"the in-cluster service account: {path}: no such file")
    host = f"[{host}]" if ":" in host else host
    trust = Trust(ca.read_bytes())
    _check(trust, f"the in-cluster service account: {ca}")
    return ClusterAccess(f"https://{host}:{port}", trust, TokenFile(token))


def from_kubeconfig(path: Path) -> ClusterAccess:
    """The current context's cluster and user of the kubeconfig at ``path``."""
    where = f"kubeconfig {path}"
    if not path.is_file():
        raise KubeConfigError(f"{where}: no such file")
    try:
        config = yaml.safe_load(path.read_text())
    except OSError as e:
        raise KubeConfigError(f"{where}: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise KubeConfigError(f"{where}: not YAML: {e}") from None
    if not isinstance(config, dict):
        raise KubeConfigError(f"{where}: not a kubeconfig (a mapping with clusters, users and contexts)")
    current = config.get("current-context")
    if not current:
        raise KubeConfigError(f"{where}: current-context is not set")
    context = _named(config, "contexts", "context", str(current), where)
    cluster = _named(config, "clusters", "cluster", str(context.get("cluster", "")), where)
    user_name = context.get("user")
    user = _named(config, "users", "user", str(user_name), where) if user_name else {}
    return _access(cluster, user, path.parent, f"{where}, context {current}")


def _named(config: Mapping[str, Any], section: str, key: str, name: str, where: str) -> dict[str, Any]:
    for entry in config.get(section) or ():
        if isinstance(entry, dict) and entry.get("name") == name:
            value = entry.get(key) or {}
            if not isinstance(value, dict):
                raise KubeConfigError(f"{where}: {section}[{name}].{key} is not a mapping")
            return value
    raise KubeConfigError(f"{where}: no {key} named {name!r} in {section}")


def _access(cluster: Mapping[str, Any], user: Mapping[str, Any], base: Path, where: str) -> ClusterAccess:
    server = str(cluster.get("server") or "").rstrip("/")
    if not server.startswith(("https://", "http://")):
        raise KubeConfigError(f"{where}: cluster.server {server!r} is not an http(s) URL")
    for refused, why in (
        ("auth-provider", "client-go deprecated auth providers (gcp and azure gone since 1.26); use an exec plugin"),
        ("username", "API servers no longer take basic authentication (since 1.19)"),
    ):
        if user.get(refused):
            raise KubeConfigError(f"{where}: user.{refused}: not supported: {why}")
    ca = _material(cluster, "cluster.certificate-authority", base, where)
    cert = _material(user, "user.client-certificate", base, where)
    key = _material(user, "user.client-key", base, where)
    if (cert is None) != (key is None):
        raise KubeConfigError(f"{where}: user.client-certificate and user.client-key go together")
    trust = Trust(ca, not cluster.get("insecure-skip-tls-verify"))
    _check(trust, f"{where}: cluster.certificate-authority")
    if cert is not None and key is not None:
        own = ClientCertificate(cert, key, f"{where}: user.client-certificate / user.client-key")
        trust = dataclasses.replace(trust, certificate=own)
        _check(trust, own.source)
    server_name = cluster.get("tls-server-name")
    proxy = cluster.get("proxy-url")
    return ClusterAccess(
        server,
        trust,
        _credentials(user, cluster, server, ca, base, where),
        tls_server_name=str(server_name) if server_name else None,
        proxy=str(proxy) if proxy else None,
    )


def _credentials(
    user: Mapping[str, Any], cluster: Mapping[str, Any], server: str, ca: bytes | None, base: Path, where: str
) -> Credentials:
    plugin = user.get("exec")
    if plugin:
        return _exec_plugin(plugin, cluster, server, ca, base, where)
    token_file = user.get("tokenFile")
    if token_file:  # client-go: the file's token takes precedence over a token beside it
        return TokenFile(_resolve(str(token_file), base))
    token = user.get("token")
    if token:
        return StaticToken(str(token))
    return NoToken()


def _exec_plugin(
    plugin: Any, cluster: Mapping[str, Any], server: str, ca: bytes | None, base: Path, where: str
) -> ExecPlugin:
    if not isinstance(plugin, dict) or not plugin.get("command"):
        raise KubeConfigError(f"{where}: user.exec.command is not set")
    api_version = str(plugin.get("apiVersion") or "")
    if api_version not in EXEC_API_VERSIONS:
        known = ", ".join(EXEC_API_VERSIONS)
        raise KubeConfigError(f"{where}: user.exec.apiVersion {api_version!r} is not one of {known}")
    if plugin.get("interactiveMode") == "Always":
        raise KubeConfigError(f"{where}: user.exec.interactiveMode Always: pilotfish cannot answer a prompt")
    command = str(plugin["command"])
    # client-go: a relative command with a path separator is relative to the kubeconfig's directory
    if "/" in command and not command.startswith("/"):
        command = str(base / command)
    env: dict[str, str] = {}
    for entry in plugin.get("env") or ():
        if not isinstance(entry, dict) or not entry.get("name"):
            raise KubeConfigError(f"{where}: user.exec.env: each entry needs a name and a value")
        env[str(entry["name"])] = str(entry.get("value", ""))
    info = None
    if plugin.get("provideClusterInfo"):
        info = {"server": server, "insecure-skip-tls-verify": bool(cluster.get("insecure-skip-tls-verify"))}
        if ca is not None:
            info["certificate-authority-data"] = base64.b64encode(ca).decode()
        if cluster.get("tls-server-name"):
            info["tls-server-name"] = str(cluster["tls-server-name"])
    return ExecPlugin(
        command,
        tuple(str(a) for a in plugin.get("args") or ()),
        env,
        api_version,
        str(plugin.get("installHint") or ""),
        info,
    )


def _material(section: Mapping[str, Any], field: str, base: Path, where: str) -> bytes | None:
    """PEM bytes from ``FIELD-data`` (base64, preferred as client-go prefers it) or the file ``FIELD``."""
    name = field.split(".", 1)[1]
    data = section.get(f"{name}-data")
    if data:
        try:
            return base64.b64decode(str(data), validate=True)
        except (binascii.Error, ValueError):
            raise KubeConfigError(f"{where}: {field}-data is not base64") from None
    file = section.get(name)
    if not file:
        return None
    try:
        return _resolve(str(file), base).read_bytes()
    except OSError as e:
        raise KubeConfigError(f"{where}: {field} {file}: {e.strerror or e}") from None


def _resolve(file: str, base: Path) -> Path:
    path = Path(file).expanduser()
    return path if path.is_absolute() else base / path


def _check(trust: Trust, where: str) -> None:
    try:
        trust.context()
    except (ssl.SSLError, ValueError) as e:
        raise KubeConfigError(f"{where}: {e}") from None

