"""What a preview is asked for, as the online endpoint receives it and the offline command
reads it: the change's YAML texts (each with the name its messages give), the objects to
delete and the proxies to restrict to."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.config.loader import LoadResult, load_documents
from app.config.objects import ConfigKey, ConfigObject
from app.errors import SettingsError
from app.preview.change import Proposal, parse_delete, propose


@dataclass(frozen=True, slots=True)
class DiffRequest:
    files: tuple[tuple[str, str], ...]  # (name, YAML text)
    deletes: tuple[ConfigKey, ...] = ()
    proxies: tuple[str, ...] = ()
    show_diff: bool = False

    def proposal(self, current: Mapping[ConfigKey, ConfigObject], loaded: Iterable[LoadResult] = ()) -> Proposal:
        """The change against ``current``: ``loaded`` (already read), then each text, read as
        ``pilotfish validate`` reads a file."""
        texts = (load_documents(text, name, strict=True) for name, text in self.files)
        return propose([*loaded, *texts], self.deletes, current)


def _strings(value: Any, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SettingsError(f"{what}: want a list of strings")
    return value


def diff_request(body: Mapping[str, Any]) -> DiffRequest:
    """The JSON body of ``POST /debug/diff``: ``{"files": [{"name", "text"}], "delete":
    ["KIND/NS/NAME"], "proxy": ["ID"], "showDiff": bool}`` (every key optional)."""
    files = body.get("files", [])
    if not isinstance(files, list) or not all(
        isinstance(f, dict) and isinstance(f.get("name"), str) and isinstance(f.get("text"), str) for f in files
    ):
        raise SettingsError('files: want a list of {"name": string, "text": string}')
    deletes = _strings(body.get("delete", []), "delete")
    proxies = _strings(body.get("proxy", []), "proxy")
    show = body.get("showDiff", False)
    if not isinstance(show, bool):
        raise SettingsError("showDiff: want true or false")
    return DiffRequest(
        tuple((f["name"], f["text"]) for f in files),
        tuple(parse_delete(d) for d in deletes),
        tuple(proxies),
        show,
    )


def request_body(
    files: Sequence[tuple[str, str]], deletes: Sequence[str], proxies: Sequence[str], show: bool
) -> dict[str, Any]:
    """The JSON body ``diff_request`` reads."""
    return {
        "files": [{"name": name, "text": text} for name, text in files],
        "delete": list(deletes),
        "proxy": list(proxies),
        "showDiff": show,
    }
