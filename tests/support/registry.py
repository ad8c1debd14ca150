"""Feeding YAML straight to a ServiceRegistry, for the registry tests: each text is parsed as one
multi-document file (any rejected object fails the test) and applied as one batch of events."""

from __future__ import annotations

from app.config.loader import load_documents
from app.config.objects import ConfigEvent, ConfigObject, EventType
from app.registry.registry import RegistryDelta, ServiceRegistry


def objects(text: str) -> list[ConfigObject]:
    result = load_documents(text, "test.yaml")
    assert result.rejected == []
    return result.objects


def add(reg: ServiceRegistry, text: str) -> RegistryDelta:
    return reg.apply_all(ConfigEvent(EventType.ADD, o) for o in objects(text))


def update(reg: ServiceRegistry, text: str) -> RegistryDelta:
    return reg.apply_all(ConfigEvent(EventType.UPDATE, o) for o in objects(text))


def delete(reg: ServiceRegistry, text: str) -> RegistryDelta:
    return reg.apply_all(ConfigEvent(EventType.DELETE, o) for o in objects(text))


def services_and_shards(delta: RegistryDelta) -> RegistryDelta:
    """Only what a delta says about Services and endpoint shards (not the escalations)."""
    return RegistryDelta(delta.services_changed, delta.endpoints_changed)
