"""The seam between serving xDS and generating it (DESIGN §1; go-control-plane's ConfigWatcher).

The transport (``Connection``, the sessions, the server) asks a ``ResourceSource`` for
resources and knows nothing of what they are made from: who a client is (``Client``: an id to
log and a version to count), what a push request says (``Push``: the observer's handles), which
types a change affects and which resources follow which are the source's. What the source keeps
per stream is an opaque note the transport stores and hands back (``PushPlan.note``; the mesh's
source keeps the scope the proxy's last full push used there, istiod's PrevSidecarScope), and
per watch ``WatchedResource.synced``, which the transport only keeps.

A push is one call, ``push``: the source filters it (nothing for this client, or the types to
push in ADS order, each forced or not and following a leader type or not), and the transport then
asks the returned plan for each type's answer, telling it which names it re-sent of the leader
type (a re-sent cluster's endpoints must be sent again for Envoy to warm it). The plan also
holds the client as the push found it, which the stream keeps from then on. The answer is the
type's whole set, or a ``Partial``: what the push changed, when the source can tell it apart.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from envoy.config.core.v3 import base_pb2

from app.security.authn import Caller, SpiffeId
from app.xds.cause import Cause
from app.xds.resource import Resource
from app.xds.watch import WatchedResource


class Client(Protocol):
    """What the transport reads of the client a source made of a stream's node."""

    @property
    def id(self) -> str:
        """The node id, for logs and the per-client metrics."""
        ...

    @property
    def istio_version(self) -> str:
        """The version the client says it runs ("" unknown), a label of the connection gauge."""
        ...


class Push(Protocol):
    """What the transport reads of a push request: the observer's handles it carries."""

    @property
    def traces(self) -> tuple[Hashable, ...]: ...


C = TypeVar("C", bound=Client)
P = TypeVar("P", bound=Push)
C_co = TypeVar("C_co", bound=Client, covariant=True)
P_contra = TypeVar("P_contra", bound=Push, contravariant=True)


@dataclass(frozen=True, slots=True)
class Partial:
    """What a push changed of one type for one client: the current resources among the names it
    may have touched, and every name considered (one the client holds that is considered but
    not among the resources is gone)."""

    resources: list[Resource]
    considered: frozenset[str]


@dataclass(frozen=True, slots=True)
class PushAnswer:
    """One type's answer to a push: the type's whole current set (``considered`` None) or a
    partial answer (the current resources among the names ``considered``), and, when the source
    told them apart, the resources the push changed (a SotW response carrying the whole set then
    changes only those for the client)."""

    resources: Sequence[Resource]
    considered: frozenset[str] | None
    changed: Sequence[Resource] | None


@dataclass(frozen=True, slots=True)
class TypePush:
    """A type a push sends: ``force`` every watched resource, changed or not; ``leader`` the
    type whose re-sent resources this one sends again by the same names (None: none)."""

    type_url: str
    force: bool
    leader: str | None


class PushPlan(Protocol[C_co]):
    """What a push does to one stream, from the source."""

    @property
    def client(self) -> C_co:
        """The stream's client from now on: the source may find it changed (a proxy whose pod
        was relabelled has new labels, istiod computeProxyState), and the stream keeps it."""
        ...

    @property
    def note(self) -> object:
        """The stream's note from now on (the transport hands it to the next ``push``)."""
        ...

    @property
    def types(self) -> Sequence[TypePush] | None:
        """The watched types to push, in order; None when the change cannot affect the client
        (the push is skipped)."""
        ...

    def answer(
        self, step: TypePush, watch: WatchedResource, force_names: Collection[str], partial: bool
    ) -> PushAnswer | None:
        """The answer for ``step``'s type (None: a type the source does not serve).
        ``force_names`` are the names re-sent of its leader type, whose current versions the
        answer must hold; ``partial`` says the protocol can carry a partial answer alone."""
        ...


class ResourceSource(Protocol[C, P_contra]):
    """What a ``Connection`` asks for."""

    def note(self, client: C) -> object:
        """The note of a stream answered the first time (before any push)."""
        ...

    def generate(self, type_url: str, client: C, watch: WatchedResource) -> list[Resource] | None:
        """The type's current resources the client may watch (None: a type not served)."""
        ...

    def push(self, client: C, note: object, request: P_contra, watched: Collection[str]) -> PushPlan[C]:
        """What ``request`` does to a stream of ``client`` watching the types ``watched``;
        ``note`` is the stream's (None before any answer)."""
        ...

    def rejected(self, client: C, type_url: str, error: str, watch: WatchedResource) -> Sequence[Cause]:
        """The config objects the resources the client just rejected (``error``: its message)
        were made from, for the NACK's log line, metric and trace (none: not known)."""
        ...


class ServedSource(ResourceSource[C, P_contra], Protocol[C, P_contra]):
    """What the gRPC server asks besides: the client a stream's node describes, and what the
    secure port decides about it."""

    def client(self, node: base_pb2.Node) -> C:
        """The client ``node`` describes; raises InvalidNode (app/xds/errors.py), its message
        saying what in the node cannot be read."""
        ...

    def authorize(self, client: C, caller: Caller) -> tuple[C, SpiffeId]:
        """The client as the secure port's ``caller`` may have it, and the identity that
        matched (istiod authorize); raises Unauthorized."""
        ...

    def secret_access(self, client: C, denied: str) -> C:
        """The client with the API server's word on its reading Secrets ("" allowed, else why
        not), before credentialName key pairs are generated for it."""
        ...
