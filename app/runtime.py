"""The composition root: config sources -> Environment -> Debouncer -> PushContext -> PushQueue ->
xDS streams, plus the debug HTTP server and the validation webhook, all in one TaskGroup
(DESIGN §1, §7 rule 8).

The sources are a config dir, a Kubernetes API server (informers) and a mesh config file, in
any combination; each is watched by its own supervised task (a failure is logged and the watch
restarted; the last good config stays in force). Config events are applied to the Environment
as they arrive (cheap, synchronous); the resulting PushRequest goes to the one Debouncer. When
it fires, the Discovery (app/xds/discovery.py) pushes it: the next snapshot built and served,
the shared resource cache invalidated, every connected proxy queued. The runtime records the
push (metrics, ``/debug/push_status``, the heap policy).
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import logging
import os
import socket
import ssl
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from app import __version__
from app.config.objects import ISTIO_KINDS, ConfigEvent, ConfigObject, EventType, Kind
from app.config.validation.spec import istio_warnings
from app.controllers.manager import Controllers, mesh_selectors
from app.debug import xds_debug
from app.debug.configz import Configz
from app.debug.push_history import PushHistory
from app.debug.server import DebugServer
from app.environment import Change, Environment
from app.errors import ConfigError
from app.heap import HeapKeeper
from app.inject.native_sidecars import NativeSidecarMode
from app.model.jwks import ENVOY as ENVOY_FETCHES
from app.model.jwks import HYBRID, uris_to_fetch
from app.model.proxy import Proxy
from app.model.push_context import PushContext
from app.security.authn import TrustedTokenFile
from app.security.ca import CertificateAuthority
from app.security.ca_dir import CaDirWatch
from app.security.ca_store import KubeCaStore
from app.security.jwks import FIRST_FETCH_WAIT as JWKS_FIRST_FETCH_WAIT
from app.security.jwks import JwksResolver
from app.security.secret_access import SecretAccessReviewer
from app.security.server import Authenticator, CertificateService, SecurePort
from app.security.token_review import TokenReviewer
from app.settings import Settings, split_address
from app.sources.kube.client import KubeClient, api_client
from app.sources.kube.nodes import NodeInformer
from app.sources.kube.source import KubeSource
from app.sources.source import Source
from app.supervise import supervise
from app.telemetry.pilot import PilotMetrics
from app.webhook.ca_bundle import CaBundlePatcher
from app.webhook.certificate import ServingCertificate, istiod_dns_names
from app.webhook.file_certificate import FileCertificate
from app.xds.cache import ResourceCache
from app.xds.discovery import Discovery
from app.xds.mesh_source import MeshSource, MeshStream
from app.xds.next_push import push_request
from app.xds.push import Debouncer, run_push_workers
from app.xds.push_request import PushRequest
from app.xds.server import XdsServer
from app.xds.type_urls import SHORT_NAMES

if TYPE_CHECKING:
    from app.telemetry.tracing import PushTracer, Tracing
    from app.webhook.server import WebhookServer
    from app.workers import WorkerPool

logger = logging.getLogger("pilotfish")

_MAX_KEYS_SHOWN = 50  # trigger keys a push_status entry lists


class Runtime:
    def __init__(
        self, settings: Settings, tracing: Tracing | None = None, *, kube_pool: WorkerPool | None = None
    ) -> None:
        """``tracing``: the push tracer and the call that flushes it at exit (``tracing_from_env``);
        ``kube_pool``: where the Kubernetes source validates objects, when the caller started it
        (app/sources/kube/pool.py; by default the source starts its own)."""
        self.settings = settings
        self.tracer: PushTracer | None = tracing[0] if tracing is not None else None
        self._stop_tracing: Callable[[float], None] | None = tracing[1] if tracing is not None else None
        self.env = Environment(domain_suffix=settings.domain_suffix, features=settings.features)
        self.sources: list[Source] = []
        self._kube: KubeSource | None = None
        self._kube_pool = kube_pool
        self._nodes: NodeInformer | None = None  # the kubelets the webhook's native sidecars hang on
        # what pilotfish writes to the API server as the elected leader (app/controllers); the
        # CA's root goes to it at start, a new root through ``root_changed``
        self.controllers: Controllers | None = None
        # the file sources (and the file watcher) are imported only when files are read
        self._mesh_file: Source | None = None
        if settings.mesh_config_file is not None:
            from app.sources.mesh_file import MeshFileSource

            self._mesh_file = MeshFileSource(settings.mesh_config_file, debounce_ms=settings.file_debounce_ms)
            self.sources.append(self._mesh_file)
        if settings.config_dir is not None:
            from app.sources.files import FileSource

            self.sources.append(
                FileSource(
                    settings.config_dir,
                    system_namespace=settings.system_namespace,
                    debounce_ms=settings.file_debounce_ms,
                )
            )
        self.discovery: Discovery[MeshStream] = Discovery(
            self.env,
            ResourceCache(verify=settings.cache_assert),
            streams=self.streams,
            unaffected=_unaffected,
            observer=self.tracer,
        )
        self.generator = self.discovery.generator
        self.queue = self.discovery.queue
        self.debouncer = Debouncer(
            self._fire,
            debounce_after=settings.debounce_after,
            debounce_max=settings.debounce_max,
            eds_debounce=settings.eds_debounce,
        )
        # RequestAuthentication jwksUri keys the control plane fetches (istiod's default mode)
        mode = self.env.features.jwks_fetch_mode
        self._jwks = JwksResolver(self._jwks_changed) if mode != ENVOY_FETCHES else None
        self.heap = HeapKeeper(enabled=settings.gc_freeze)
        self.metrics = PilotMetrics()
        self._configz = Configz()  # /debug/configz's renderings, kept while each object is in force
        self._last_push: dict[str, Any] | None = None  # /debug/push_status
        self._last_push_sent: dict[tuple[tuple[str, str], ...], float] = {}
        self.push_history = PushHistory()
        self.ca: CertificateAuthority | None = None
        self.secure: SecurePort | None = None
        self._authenticator: Authenticator | None = None
        self._issuing: CertificateService | None = None
        self._ca_store: KubeCaStore | None = None  # the CA kept in the API server
        self._root_hooks: list[Callable[[str], None]] = []
        self._ca_dir: CaDirWatch | None = None  # --ca-dir, followed as istiod follows /etc/cacerts
        if settings.ca_dir is not None:
            self._serve_ca(CertificateAuthority.load_or_create(settings.ca_dir, self._trust_domain()))
            self._ca_dir = CaDirWatch(settings.ca_dir, self._current_ca, multi_root=settings.multi_root_mesh)
        self.source = MeshSource(self.generator, self.env.config_object, self.env.registry.with_workload_labels)
        self.xds: XdsServer[Proxy, PushRequest] = XdsServer(
            self.source,
            on_disconnect=self._disconnected,
            on_connect=lambda _: self.heap.connected(),
            send_timeout=settings.xds_send_timeout,
            metrics=self.metrics,
            observer=self.tracer,
            authenticator=self._authenticator,
            extra_handlers=[self._issuing.handler()] if self._issuing is not None else [],
            debug=self._debug_answers,
        )
        self.http = DebugServer(self)
        self.webhook: WebhookServer | None = None
        # pilotfish's own webhook certificate, from its CA, when no files are given (istiod's)
        self.webhook_certificate: ServingCertificate | None = None
        # or the --webhook-cert / --webhook-key files, followed as they are renewed (istiod's)
        self.webhook_files: FileCertificate | None = None
        self._patcher: CaBundlePatcher | None = None  # made once the API client is
        kube = settings.kubeconfig is not None or settings.in_cluster
        ca_on = settings.ca_dir is not None or (kube and settings.ca_server)  # loaded in run() from its Secret
        # both webhooks (/validate, /inject) on one server, with the given files or, as istiod in
        # its cluster, a certificate of the CA; from outside a cluster the latter only with an
        # explicit --revision, so a laptop run never re-patches the cluster istiod's caBundles
        files = settings.webhook_cert is not None and settings.webhook_key is not None
        if settings.webhook_address and (files or (ca_on and kube and (settings.in_cluster or settings.revision))):
            # imported only for the webhooks: the injector and its template engine are 60 ms of
            # start-up that a control plane without them need not pay
            from app.inject.source import injection_source
            from app.webhook.server import WebhookServer

            self.webhook = WebhookServer(
                self._webhook_file_tls if files else self._webhook_tls,
                system_namespace=settings.system_namespace,
                injection=injection_source(
                    settings, lambda: self.env.store.mesh, lambda: self.env.store.list(Kind.PROXY_CONFIG)
                ),
                metrics=self.metrics,
            )
        self.started = asyncio.Event()

    # --- what the debug server and the streams read -----------------------------------

    def push_context(self) -> PushContext:
        return self.discovery.push_context()

    def resource_source(self) -> MeshSource:
        return self.source

    @property
    def ready(self) -> bool:
        return self.started.is_set()

    def rejections(self) -> Sequence[ConfigError]:
        return [error for source in self.sources for error in source.rejections()]

    def rejected_pushes(self) -> Sequence[str]:
        return list(self.metrics.recent_rejections)

    def streams(self) -> Sequence[MeshStream]:
        return list(self.xds.streams.values())

    def environment(self) -> Environment:
        return self.env

    def config_objects(self) -> Sequence[ConfigObject]:
        """The config objects in force, from every source."""
        return [obj for source in self.sources for obj in source.objects()]

    def refused_streams(self) -> Sequence[dict[str, str]]:
        return list(self.xds.refused)

    def ca_root(self) -> str | None:
        return self.ca.root_pem if self.ca is not None else None

    def _debug_answers(
        self, type_url: str, names: Sequence[str], identities: Sequence[str]
    ) -> tuple[list[xds_debug.Named], str]:
        """istioctl's debug types over xDS (``istio.io/debug/syncz``, ``.../config_dump``)."""
        return xds_debug.answer(
            type_url, names, identities,
            streams=self.streams(),
            source=self.source,
            root_namespace=self.env.store.mesh.root_namespace or self.settings.system_namespace,
            control_plane=xds_debug.control_plane_identifier(self.settings.pod_name, __version__),
        )  # fmt: skip

    def _webhook_tls(self) -> ssl.SSLContext:
        """The webhooks' TLS context, with a certificate of the CA for the names the API server
        calls (made when the webhook server starts: the CA is in force by then)."""
        ns, revision = self.settings.system_namespace, self.settings.revision
        self.webhook_certificate = ServingCertificate(
            self._current_ca, (*istiod_dns_names(ns, revision), "localhost"), ("127.0.0.1", "::1")
        )
        self._root_hooks.append(self.webhook_certificate.set_root)  # issued under the current root already
        return self.webhook_certificate.context

    def _webhook_file_tls(self) -> ssl.SSLContext:
        """The webhooks' TLS context from the --webhook-cert / --webhook-key files (read when the
        webhook server starts; a bad pair stops the start, naming the files)."""
        assert self.settings.webhook_cert is not None and self.settings.webhook_key is not None
        self.webhook_files = FileCertificate(self.settings.webhook_cert, self.settings.webhook_key)
        return self.webhook_files.context

    def _webhook_ca_bundle(self) -> str:
        return self.webhook_certificate.ca_bundle if self.webhook_certificate is not None else ""

    def _current_ca(self) -> CertificateAuthority:
        if self.ca is None:
            raise RuntimeError("the webhook certificate needs the CA")
        return self.ca

    # --- the CA -----------------------------------------------------------------------

    def _serve_ca(self, ca: CertificateAuthority) -> None:
        """The secure port, its authenticator and the certificate service, for ``ca``."""
        self.ca = ca
        self.metrics.ca_expiry(*ca.expiry())
        ns = self.settings.system_namespace
        self.secure = SecurePort(
            ca,
            # istiod's DNS names, the revision's Service included: injected proxies dial
            # istiod-REV.NS.svc and check it is in the certificate
            (*istiod_dns_names(ns, self.settings.revision), "localhost"),
            ("127.0.0.1", "::1"),
            on_refuse=self.metrics.secure_port_refused,
        )
        tokens = TrustedTokenFile(self.settings.trusted_token_file) if self.settings.trusted_token_file else None
        self._authenticator = Authenticator(self.secure, tokens, self._trust_domain)
        self._issuing = CertificateService(ca, self._authenticator, self.metrics.certificate_request)

    def _new_root(self) -> CertificateAuthority:
        """A self-signed root as istiod makes one: O = the mesh's trust domain."""
        ttl = datetime.timedelta(seconds=self.settings.self_signed_ca_cert_ttl)
        return CertificateAuthority.self_signed(
            self._trust_domain(), ttl=ttl, key_size=self.settings.self_signed_ca_rsa_key_size
        )

    def on_root_changed(self, hook: Callable[[str], None]) -> None:
        """Call ``hook(root_pem)`` with the mesh root now (when there is a CA already) and again
        each time it changes (the CA's Secret reloaded or rotated): the istio-ca-root-cert
        ConfigMaps, the webhooks' caBundle. A hook that raises is logged; the others still run."""
        self._root_hooks.append(hook)
        if self.ca is not None:
            self._call_root_hook(hook, self.ca.root_pem)

    def _call_root_hook(self, hook: Callable[[str], None], root: str) -> None:
        try:
            hook(root)
        except Exception:
            logger.exception("root certificate hook %r failed", hook)

    def _ca_changed(self, ca: CertificateAuthority) -> None:
        """A new CA from its Secret or its dir: it signs from now on, the secure port's new handshakes use
        it, and a new root goes to every hook."""
        previous, self.ca = self.ca, ca
        self.metrics.ca_expiry(*ca.expiry())
        if self._issuing is not None:
            self._issuing.ca = ca
        if self.secure is not None:
            self.secure.use(ca)
        if previous is None or previous.root_pem != ca.root_pem:
            logger.info("CA: the mesh root changed")
            self.root_changed(ca.root_pem)
        if self.controllers is not None:
            self.controllers.set_crl(ca.crl_pem)  # every namespace's istio-ca-crl

    async def _rotate_root(self) -> None:
        """istiod's self-signed root rotator on the CA Secret (app/security/ca_store.py)."""
        assert self._ca_store is not None
        await self._ca_store.rotate_root(
            self._ca_changed,
            check_interval=self.settings.root_cert_check_interval,
            grace_percent=self.settings.root_cert_grace_percentile,
            ttl=datetime.timedelta(seconds=self.settings.self_signed_ca_cert_ttl),
            jitter=self.settings.root_cert_rotator_jitter,
        )

    def _trust_domain(self) -> str:
        return self.env.store.mesh.trust_domain or "cluster.local"

    def metrics_text(self) -> str:
        cache = self.generator.cache
        self.metrics.cache_state(cache.hits, cache.misses, cache.evictions)
        self.metrics.rejections(Counter(error.kind for error in self.rejections()))
        return self.metrics.render()

    def config_status(self) -> list[dict[str, Any]]:
        """``/debug/configz``, as istiod's: the Istio config in force in Kubernetes form, then
        every rejection as an Event (app/debug/configz.py)."""
        objects = self.config_objects()
        return self._configz(objects, self.rejections())

    def push_status(self) -> dict[str, Any]:
        """``/debug/push_status``: the last push fired and the responses sent since, by type, and
        the latest pushes, each with its trigger, the proxies reached and the resources sent."""
        if self._last_push is None:
            return {}
        sent = {
            dict(labels)["type"]: count - self._last_push_sent.get(labels, 0)
            for labels, count in self.metrics.pushes.values.items()
        }
        since = {t: n for t, n in sorted(sent.items()) if n}
        return {**self._last_push, "responsesSinceByType": since, "pushes": self.push_history.json()}

    def pending_push(self, stream: MeshStream) -> bool:
        return self.queue.queued(stream)

    # --- lifecycle ----------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set, then drain: GOAWAY to clients, in-flight pushes get
        ``shutdown_grace`` seconds."""
        # with Kubernetes: service-account tokens checked by TokenReviews, and whether an
        # account may read Secrets by SubjectAccessReviews, as istiod asks in a cluster
        reviewers: tuple[TokenReviewer, SecretAccessReviewer] | None = None
        if self.settings.kubeconfig is not None or self.settings.in_cluster:
            client = api_client(self.settings.kubeconfig)
            reviewers = (TokenReviewer(client), SecretAccessReviewer(client))
            self._kube = KubeSource(
                client,
                system_namespace=self.settings.system_namespace,
                mesh_from_configmap=self.settings.mesh_config_file is None,
                # the revision's mesh ConfigMap (istio-REV), and no Istio config labelled for another
                revision=self.settings.revision,
                wait_for_server=self.settings.in_cluster,  # as istiod: a restarting cluster is waited for
                pool=self._kube_pool,
            )
            self.sources.append(self._kube)
            if self.settings.kube_controllers:
                self.controllers = self._controllers(client)
                self.on_root_changed(self.controllers.set_root)
                if self.ca is not None:
                    self.controllers.set_crl(self.ca.crl_pem)
            if self.webhook is not None and self.settings.native_sidecars is NativeSidecarMode.AUTO:
                self._nodes = self.webhook.nodes = NodeInformer(client)
            if self.webhook is not None and self.settings.webhook_cert is None:
                self._patcher = CaBundlePatcher(
                    client, self.settings.revision, self._webhook_ca_bundle, namespace=self.settings.system_namespace
                )
            if self.ca is None and self.settings.ca_server:
                self._ca_store = KubeCaStore(
                    client,
                    self.settings.system_namespace,
                    self._new_root,
                    multi_root=self.settings.multi_root_mesh,
                    use_cacerts=self.settings.use_cacerts_for_self_signed_ca,
                )
        try:
            for source in self.sources:
                self._apply(source, await source.start())  # each source logs its rejections
            if self._jwks is not None:
                # the first push carries the keys, as istiod fetches a uri when a push first needs it
                await self._jwks.fetched(timeout=JWKS_FIRST_FETCH_WAIT)
            if self._ca_store is not None:
                # after the sources: the mesh config names the trust domain a new root is made for
                ca = await self._ca_store.load()
                self._serve_ca(ca)
                self.xds.authenticator = self._authenticator
                self.xds.extra_handlers = (self._issuing.handler(),) if self._issuing is not None else ()
                self.root_changed(ca.root_pem)  # hooks registered before there was a CA
            if reviewers is not None and self._authenticator is not None:
                tokens, secrets = reviewers
                if self._authenticator.tokens is None:
                    self._authenticator.tokens = tokens
                self.xds.secret_access = secrets
            self.discovery.start()
            self.heap.started()
            inner = await self.xds.start(self.settings.xds_address, inner=self.secure is not None)
            if self.secure is not None:
                await self.secure.start(split_address(self.settings.secure_xds_address), ("127.0.0.1", inner))
            await self.http.start(self.settings.http_address)
            if self.webhook is not None:
                await self.webhook.start(self.settings.webhook_address)
            async with asyncio.TaskGroup() as tg:
                # supervised: a task that fails is logged and restarted, never the end of serving
                watches = [
                    tg.create_task(
                        supervise(f"{type(s).__name__} watch", functools.partial(self._watch_config, s), forever=True)
                    )
                    for s in self.sources
                ]
                tasks = [
                    tg.create_task(supervise("debouncer", self.debouncer.run)),
                    tg.create_task(
                        supervise(
                            "push workers",
                            functools.partial(run_push_workers, self.queue, self._push_to, self.settings.push_throttle),
                        )
                    ),
                ]
                if self._nodes is not None:
                    tasks.append(tg.create_task(supervise("node informer", self._nodes.run, forever=True)))
                if self.controllers is not None:
                    self.controllers.set_selectors(mesh_selectors(self.env.store.mesh))
                    tasks.append(tg.create_task(supervise("kube controllers", self.controllers.run, forever=True)))
                if self._patcher is not None and self.webhook_certificate is not None:
                    # every replica patches its webhook configurations, as istiod's patchers
                    # (no leader election: the replicas share the CA, so they write one bundle)
                    renewals = functools.partial(self.webhook_certificate.run, self._patcher.resync)
                    tasks.append(tg.create_task(supervise("webhook caBundle patcher", self._patcher.run, forever=True)))
                    tasks.append(tg.create_task(supervise("webhook certificate renewal", renewals)))
                if self.webhook_files is not None:
                    tasks.append(tg.create_task(supervise("webhook certificate files", self.webhook_files.run)))
                if self._ca_dir is not None:
                    follow = functools.partial(self._ca_dir.run, self._ca_changed)
                    tasks.append(tg.create_task(supervise("CA dir watch", follow)))
                if self._ca_store is not None:
                    watch = functools.partial(self._ca_store.watch, self._ca_changed)
                    tasks.append(tg.create_task(supervise("CA Secret watch", watch, forever=True)))
                    if self._ca_store.self_signed and self.settings.root_cert_check_interval > 0:
                        tasks.append(tg.create_task(supervise("CA root rotation", self._rotate_root, forever=True)))
                if self.heap.enabled and self.settings.gc_sweep_interval > 0:
                    tasks.append(tg.create_task(self._sweep_heap(self.settings.gc_sweep_interval), name="heap-sweep"))
                self.started.set()
                logger.info(
                    "pilotfish ready: %d config objects, xDS on %s, HTTP on %s",
                    sum(len(source.objects()) for source in self.sources),
                    self.settings.xds_address,
                    self.settings.http_address,
                )
                await stop.wait()
                logger.info("shutting down")
                for task in watches:
                    task.cancel()
                await asyncio.shield(self.xds.stop(self.settings.shutdown_grace))
                for task in tasks:
                    task.cancel()
        finally:
            # also when starting failed (an unreachable API server) or a task raised past its
            # supervisor: clients get GOAWAY and every source is closed
            self.queue.close()
            if self.secure is not None:
                await asyncio.shield(self.secure.stop())
            await asyncio.shield(self.xds.stop(self.settings.shutdown_grace))
            await asyncio.shield(self.http.stop())
            if self.webhook is not None:
                await asyncio.shield(self.webhook.stop())
            for source in self.sources:
                await asyncio.shield(source.close())
            if self._jwks is not None:
                await asyncio.shield(self._jwks.close())
            if self.tracer is not None:
                self.tracer.close()  # pushes still open end (and are exported) now
            if self._stop_tracing is not None:
                # flushes what is batched, for at most the grace the streams had
                await asyncio.to_thread(self._stop_tracing, self.settings.shutdown_grace)

    def root_changed(self, pem: str) -> None:
        """The CA's root is now ``pem`` (``self.ca`` replaced first): every hook hears it (every
        namespace's istio-ca-root-cert, written by the leader; the webhook certificate, re-issued
        under it, and the webhook configurations' caBundle)."""
        for hook in list(self._root_hooks):
            self._call_root_hook(hook, pem)

    def _controllers(self, client: KubeClient) -> Controllers:
        settings = self.settings
        return Controllers(
            client,
            system_namespace=settings.system_namespace,
            identity=settings.leader_identity or f"unknown-{socket.gethostname()}-{os.getpid()}",
            revision=settings.revision,
            root=None,  # the CA's, through the root hook (``on_root_changed``)
            leader_election=settings.leader_election,
            lease_duration=settings.leader_lease_duration,
            ip_autoallocate=settings.features.enable_ip_autoallocate,
            ipv4_prefix=settings.ip_autoallocate_ipv4_prefix,
            ipv6_prefix=settings.ip_autoallocate_ipv6_prefix,
            on_leading=self.metrics.leader_status,
            crl_configmap=settings.crl_configmap if settings.ca_crl else None,
        )

    async def _watch_config(self, source: Source) -> None:
        async for events in source.watch():
            request = push_request(self._apply(source, events), len(events))
            if request is not None:
                self.debouncer.submit(request)

    def _apply(self, source: Source, events: list[ConfigEvent]) -> Change:
        if source is self._kube:
            for event in events:
                if event.obj.kind in ISTIO_KINDS:
                    self.metrics.config_event(event.obj.kind, event.type.value)
                else:
                    self.metrics.registry_event(event.obj.kind, event.type.value)
        for event in events:
            obj = event.obj
            for warning in istio_warnings(obj.spec) if event.type is not EventType.DELETE else ():
                logger.warning("%s: %s %s: %s", obj.source, obj.kind, obj.namespaced_name, warning)
        change = self.env.apply(events)
        if self._jwks is not None and any(event.obj.kind is Kind.REQUEST_AUTHENTICATION for event in events):
            self._jwks.want(self._jwks_uris())
        if self.controllers is not None and any(event.obj.kind is Kind.MESH_CONFIG for event in events):
            self.controllers.set_selectors(mesh_selectors(self.env.store.mesh))
        # a mesh config from a file scopes what the Kubernetes source reads (discoverySelectors)
        if self._kube is not None and source is self._mesh_file and events:
            self._kube.use_mesh_config(self.env.store.mesh)
        return change

    def _jwks_uris(self) -> dict[str, float]:
        mode = self.env.features.jwks_fetch_mode
        hosts = {service.hostname for service in self.env.registry.services()} if mode == HYBRID else set()
        return uris_to_fetch(self.env.store.list(Kind.REQUEST_AUTHENTICATION), mode, hosts.__contains__)

    def _jwks_changed(self, uris: frozenset[str]) -> None:
        """New keys for ``uris``: the policies naming them are pushed with the keys inline."""
        assert self._jwks is not None
        self.env.jwks = dict(self._jwks.keys)
        policies = self.env.store.list(Kind.REQUEST_AUTHENTICATION)
        keys = frozenset(p.key for p in policies if any(r.jwks_uri in uris for r in p.spec.jwt_rules))
        request = push_request(Change(configs=keys), len(keys))
        if request is not None:
            self.debouncer.submit(request)

    async def _fire(self, request: PushRequest) -> None:
        pushed = await self.discovery.fire(request)
        request, push, started, built = pushed.request, pushed.push, pushed.started, pushed.built
        services = sum(len(by_namespace) for by_namespace in push.service_index.by_hostname.values())
        # the Debouncer stamps request.start with the monotonic time of the first event
        virtual_services = len(push.inputs.virtual_services)
        debounced, init = built - request.start, built - started
        self.metrics.pushed(request.reasons, request.full, debounced, init, services, virtual_services)
        self._last_push = {
            "version": push.version,
            "trigger": {
                "configs": sorted(str(key) for key in request.configs_updated)[:_MAX_KEYS_SHOWN],
                "endpointShards": sorted(f"{h}/{ns}" for h, ns in request.endpoint_services)[:_MAX_KEYS_SHOWN],
                "proxyIPs": sorted(request.proxy_ips)[:_MAX_KEYS_SHOWN],
            },
            "full": request.full,
            "reasons": dict(request.reasons),
            "configsUpdated": sorted(str(key) for key in request.configs_updated)[:50],
            "configsUpdatedCount": len(request.configs_updated),
            "endpointServices": sorted(f"{host}/{ns}" for host, ns in request.endpoint_services)[:50],
            "debounceSeconds": round(built - request.start, 6),
            "buildSeconds": round(built - started, 6),
            "proxiesQueued": pushed.streams,
        }
        self._last_push_sent = dict(self.metrics.pushes.values)
        self.push_history.fired(push.version, self._last_push)
        self.heap.settled()  # the new snapshot and what the change left behind

    async def _push_to(self, stream: MeshStream, request: PushRequest) -> None:
        dequeued = time.monotonic()
        self.metrics.queue_time.observe(dequeued - request.start)  # istiod measures from the push's start
        pushes = stream.connection.pushes
        try:
            # the stream tells the tracer what it wrote, before it processes any answer to it
            sent = await stream.push(request, dequeued)
        except Exception:
            self.metrics.internal_errors.add()
            raise
        if sent:
            by_type = Counter[str]()
            for resp in sent:
                by_type[SHORT_NAMES.get(resp.type_url, resp.type_url)] += len(resp.resources)
            self.push_history.reached(request.pushes, stream.connection.client.id, by_type)
        if stream.connection.pushes > pushes:  # not skipped by the dependency filter
            self.metrics.convergence.observe(time.monotonic() - request.start)

    def _disconnected(self, stream: MeshStream) -> None:
        self.generator.forget(stream.connection.client)
        dropped = self.queue.remove(stream)
        if dropped is not None and dropped.traces and self.tracer is not None:
            # queued for a stream that is gone: done with it, nothing sent
            self.tracer.proxy_pushed(stream.connection.id, stream.connection.client.id, dropped, time.monotonic(), ())

    async def _sweep_heap(self, interval: float) -> None:
        """Now and then, while no push is in flight, collect the cycles frozen objects hold."""
        while True:
            await asyncio.sleep(interval)
            if self.queue.idle():
                collected, seconds = self.heap.sweep()
                logger.info("heap sweep: %d objects collected in %.3fs", collected, seconds)


def _unaffected(stream: MeshStream, request: PushRequest) -> bool:
    """Whether a push can skip the queue for this stream: it closed, or its connection's
    filter finds nothing the push changes for its proxy."""
    return stream.closed or stream.connection.unaffected(request)
