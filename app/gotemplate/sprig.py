"""SPRIG_FUNCS: github.com/Masterminds/sprig/v3's TxtFuncMap, the functions istiod adds to its
injection templates before its own (Istio's funcmap overrides sprig's where names collide).

Left out, being neither pure nor deterministic: the clock, random, UUID, crypto, network and
environment functions (now, ago, date*, toDate, unixEpoch, rand*, shuffle, uuidv4, bcrypt,
htpasswd, genCA..., encryptAES, derivePassword, getHostByName, env, expandenv), and decryptAES.
The os* path functions are the path ones: istiod runs on Linux, where filepath is path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from app.gotemplate.sprig_case import CASE_FUNCS
from app.gotemplate.sprig_collections import COLLECTION_FUNCS
from app.gotemplate.sprig_durations import DURATION_FUNCS
from app.gotemplate.sprig_misc import MISC_FUNCS
from app.gotemplate.sprig_numbers import NUMBER_FUNCS
from app.gotemplate.sprig_semver import SEMVER_FUNCS
from app.gotemplate.sprig_strings import STRING_FUNCS
from app.gotemplate.sprig_url import URL_FUNCS

SPRIG_FUNCS: Final[dict[str, Callable[..., Any]]] = {
    "hello": lambda: "Hello!",
    **STRING_FUNCS,
    **NUMBER_FUNCS,
    **COLLECTION_FUNCS,
    **MISC_FUNCS,
    **SEMVER_FUNCS,
    **CASE_FUNCS,
    **DURATION_FUNCS,
    **URL_FUNCS,
}
