"""bookinfo behind a cached XdsGenerator in assertion mode, changed as the runtime changes it
(apply, push request, PushContext rebuild or endpoint fast path, cache invalidation)."""

from __future__ import annotations

from app.config.loader import load_documents
from app.config.model import ConfigEvent, EventType
from app.environment import Environment
from app.runtime import next_snapshot, push_request
from app.sources.files import FileSource
from app.xds.cache import ResourceCache
from app.xds.generate import XdsGenerator
from app.xds.push_request import PushRequest
from tests.support.bookinfo import BOOKINFO


class Mesh:
    def __init__(self) -> None:
        self.env = Environment()
        self.env.apply(FileSource(BOOKINFO).load())
        self.push = self.env.build_push_context(None)
        self.source = XdsGenerator(lambda: self.push, ResourceCache(verify=True))

    def apply(self, text: str) -> PushRequest:
        """Add or replace the objects in ``text``; returns the push request the change makes."""
        return self._change(text, EventType.UPDATE)

    def delete(self, text: str) -> PushRequest:
        """Delete the objects in ``text``; returns the push request the change makes."""
        return self._change(text, EventType.DELETE)

    def _change(self, text: str, event: EventType) -> PushRequest:
        objects = load_documents(text, "change.yaml").objects
        events = [ConfigEvent(event, obj) for obj in objects]
        request = push_request(self.env.apply(events), len(events))
        assert request is not None, "the change made no push"
        self.push = next_snapshot(self.push, self.env, request)()
        self.source.invalidate(request)
        return request
