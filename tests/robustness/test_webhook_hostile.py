"""Hostile admission reviews (issue 24, items 6 and 7): whatever a body holds, the webhook answers
with a review, never an HTTP error that a ``failurePolicy: Ignore`` turns into an admitted object;
what the API server can send (an UPDATE of two objects of over 1 MiB each) is reviewed; and the
validation runs in a worker process, not on the event loop that also serves xDS and ``/ready``.
"""

from __future__ import annotations

import asyncio
import copy
import json
import ssl
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import trustme

from app.webhook.file_certificate import file_context
from app.webhook.server import MAX_REVIEWS_IN_FLIGHT, BodyBytes, WebhookServer
from tests.robustness import test_loop_stall as stall

VS = {
    "apiVersion": "networking.istio.io/v1",
    "kind": "VirtualService",
    "metadata": {"name": "reviews", "namespace": "shop"},
    "spec": {"hosts": ["reviews"], "http": [{"route": [{"destination": {"host": "reviews"}}]}]},
}
BAD_REGEX = {"match": [{"uri": {"regex": "(?<=a)b"}}], "route": [{"destination": {"host": "reviews"}}]}


def envelope(obj: Any, operation: Any = "CREATE", uid: str = "u-1", **request: Any) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": uid, "operation": operation, "namespace": "shop", "object": obj, **request},
    }


def vs_with_hosts(n: int, name: str = "many") -> dict[str, Any]:
    obj = copy.deepcopy(VS)
    obj["metadata"]["name"] = name
    obj["spec"]["hosts"] = [f"h{i}.example.com" for i in range(n)]
    return obj


Post = Callable[..., Any]


@pytest.fixture
async def post(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    """POST a body (bytes, or JSON) to a running webhook; (HTTP status, decoded answer or text)."""
    server, tls = await _serve(tmp_path)
    url = f"https://127.0.0.1:{server.port}/validate"

    async def send(body: bytes | dict[str, Any], query: str = "") -> tuple[int, Any]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        async with aiohttp.ClientSession() as http, http.post(url + query, data=data, headers=headers, ssl=tls) as resp:
            text = await resp.text()
            try:
                return resp.status, json.loads(text)
            except ValueError:
                return resp.status, text

    try:
        yield send
    finally:
        await server.stop()


async def _serve(tmp_path: Path, pool: Any = None) -> tuple[WebhookServer, ssl.SSLContext]:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))
    cert.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
    kwargs: dict[str, Any] = {"pool": pool} if pool is not None else {}
    server = WebhookServer(partial(file_context, tmp_path / "tls.crt", tmp_path / "tls.key"), **kwargs)
    await server.start("127.0.0.1:0")
    client = ssl.create_default_context()
    ca.configure_trust(client)
    return server, client


def refused(status: int, answer: Any, says: str, uid: str = "u-1") -> None:
    assert status == 200, (status, answer)
    response = answer["response"]
    assert response["allowed"] is False and response["uid"] == uid, response
    assert says in response["status"]["message"], response


async def test_json_nested_deeper_than_the_decoder_goes_is_refused(post: Post) -> None:
    for depth in (985, 100_000):  # the issue's depth (a RecursionError on the loop), and far past it
        deep = "[" * depth + "]" * depth
        body = json.dumps(envelope(None)).replace("null", deep, 1).encode()
        status, answer = await post(body)
        assert status == 200, (depth, status, answer)
        assert answer["response"]["allowed"] is False, (depth, answer)
    # nested inside the spec: the field that holds it is named
    body = json.dumps(envelope(VS)).replace('"http": [', '"http": [' + "[" * 985 + "]" * 985 + ",", 1)
    status, answer = await post(body.encode())
    refused(status, answer, "VirtualService shop/reviews")


async def test_an_operation_that_is_not_a_string_is_refused(post: Post) -> None:
    for operation in (["CREATE"], {"op": "CREATE"}, 7, True):
        status, answer = await post(envelope(VS, operation=operation))
        refused(status, answer, "operation must be a string")
    status, answer = await post(envelope(VS, operation=None))  # null is Go's "": not validated
    assert status == 200 and answer["response"]["allowed"] is True


VALUES: list[Any] = [None, 0, 1.5, True, "", "x", [], [1], {}, {"a": 1}, ["CREATE"], "💥" * 3]
ENVELOPE_PATHS = [
    ("apiVersion",), ("kind",), ("request",), ("request", "uid"), ("request", "operation"),
    ("request", "namespace"), ("request", "object"), ("request", "object", "kind"),
    ("request", "object", "apiVersion"), ("request", "object", "metadata"),
    ("request", "object", "metadata", "name"), ("request", "object", "metadata", "namespace"),
    ("request", "object", "spec"), ("request", "object", "status"),
]  # fmt: skip


async def test_every_field_of_the_envelope_of_any_type_is_answered_with_a_review(post: Post) -> None:
    for path in ENVELOPE_PATHS:
        for value in VALUES:
            body = envelope(copy.deepcopy(VS))
            here = body
            for key in path[:-1]:
                here = here[key]
            here[path[-1]] = value
            status, answer = await post(body)
            assert status == 200, (path, value, status, answer)
            response = answer["response"]
            assert isinstance(response["allowed"], bool) and isinstance(response["uid"], str), (path, value)
            if not response["allowed"]:
                assert response["status"]["message"], (path, value)


async def test_an_update_of_two_objects_over_a_mebibyte_each_is_reviewed(post: Post) -> None:
    new, old = vs_with_hosts(50_000), vs_with_hosts(50_000)
    body = json.dumps(envelope(new, "UPDATE", oldObject=old)).encode()
    assert 2 * 2**20 < len(body) < 6 * 2**20
    status, answer = await post(body)
    assert status == 200 and answer["response"] == {"uid": "u-1", "allowed": True}, (status, answer)
    # and an invalid one of that size is refused for what is wrong with it
    new["spec"]["http"].append(BAD_REGEX)
    status, answer = await post(envelope(new, "UPDATE", oldObject=old))
    refused(status, answer, "field http[1].match[0].uri.regex")


async def test_a_body_larger_than_a_review_can_be_is_refused_naming_the_request(post: Post) -> None:
    body = json.dumps(envelope(vs_with_hosts(400_000), uid="0f7c5e2a-big")).encode()
    assert len(body) > 6 * 2**20
    status, answer = await post(body)
    refused(status, answer, "larger than 6291456 bytes", uid="0f7c5e2a-big")


def slow_pool() -> Any:
    """A worker pool every call of which sleeps in the worker as long as it is let."""
    from app.workers import WorkerPool

    class SlowPool(WorkerPool):
        def submit(self, fn: Callable[..., Any], *args: Any, deadline: float | None = None) -> Future[Any]:
            return super().submit(time.sleep, 60, deadline=deadline)

    return SlowPool(1, name="slow")


async def test_a_review_slower_than_the_api_servers_timeout_is_refused_before_it(tmp_path: Path) -> None:
    pool = slow_pool()
    server, tls = await _serve(tmp_path, pool)
    url = f"https://127.0.0.1:{server.port}/validate?timeout=3s"  # as the API server sends it
    try:
        started = time.monotonic()
        async with aiohttp.ClientSession() as http, http.post(url, json=envelope(VS), ssl=tls) as resp:
            answer = await resp.json()
        assert time.monotonic() - started < 3  # answered before the API server would give up
        refused(resp.status, answer, "validation did not finish within 2.0s")
    finally:
        await server.stop()
        pool.close()


async def test_stopping_does_not_wait_for_a_review_in_progress(tmp_path: Path) -> None:
    server, tls = await _serve(tmp_path)
    server._pool.close()
    server._pool = slow_pool()
    url = f"https://127.0.0.1:{server.port}/validate?timeout=30s"
    async with aiohttp.ClientSession() as http:
        reviewing = asyncio.ensure_future(http.post(url, json=envelope(VS), ssl=tls))
        await asyncio.sleep(1)
        started = time.monotonic()
        await server.stop()
        assert time.monotonic() - started < 20  # the review would take 60 s
        resp = await reviewing
        if resp.status == 200:
            assert (await resp.json())["response"]["allowed"] is False


async def test_validation_runs_off_the_event_loop(post: Post, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing in this process validates: the answers come from the worker all the same."""

    def here(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("validated in the process serving the event loop")

    import app.config.loader
    import app.webhook.admission

    monkeypatch.setattr(app.config.loader, "load_object", here)
    monkeypatch.setattr(app.webhook.admission, "load_object", here)
    status, answer = await post(envelope(vs_with_hosts(5000)))
    assert status == 200 and answer["response"] == {"uid": "u-1", "allowed": True}, answer
    bad = copy.deepcopy(VS)
    bad["spec"]["http"].append(BAD_REGEX)
    status, answer = await post(envelope(bad))
    refused(status, answer, "field http[1].match[0].uri.regex")


async def test_a_body_that_never_finishes_arriving_is_refused_by_the_deadline(tmp_path: Path) -> None:
    server, tls = await _serve(tmp_path)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port, ssl=tls, server_hostname="127.0.0.1")
        start = json.dumps(envelope(VS, uid="u-slow")).encode()[:200]
        head = (
            "POST /validate?timeout=3s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(start) + 1000}\r\n\r\n"
        )
        writer.write(head.encode() + start)  # and the rest never comes
        await writer.drain()
        response = await asyncio.wait_for(reader.read(4096), 30)
        writer.close()
        status, _, rest = response.partition(b"\r\n")
        assert status.startswith(b"HTTP/1.1 200"), response
        answer = json.loads(rest.partition(b"\r\n\r\n")[2])
        refused(200, answer, "did not arrive within 2.0s", uid="")
    finally:
        await server.stop()


async def stalled_senders(port: int, tls: ssl.SSLContext, count: int) -> list[asyncio.StreamWriter]:
    """``count`` connections that each send a review's headers and its first byte, then stall."""
    writers = []
    for _ in range(count):
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls, server_hostname="127.0.0.1")
        head = (
            "POST /validate?timeout=30s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            "Content-Length: 100000\r\n\r\n{"
        )
        writer.write(head.encode())
        await writer.drain()
        writers.append(writer)
    return writers


# was: a review took its slot before its body arrived, so these held every slot for 29 s and
# each other review was refused "not reviewed: 8 reviews were in progress for 9.0s" (istiod reads
# every body in a goroutine of its own: a slow one holds up no other)
async def test_senders_that_stall_hold_up_no_other_review(tmp_path: Path) -> None:
    server, tls = await _serve(tmp_path)
    try:
        stalled = await stalled_senders(server.port, tls, 2 * MAX_REVIEWS_IN_FLIGHT)
        await asyncio.sleep(0.3)  # the server has them all
        url = f"https://127.0.0.1:{server.port}/validate?timeout=10s"
        data = json.dumps(envelope(VS)).encode()
        headers = {"Content-Type": "application/json"}
        async with aiohttp.ClientSession() as http, http.post(url, data=data, headers=headers, ssl=tls) as resp:
            answer = await asyncio.wait_for(resp.json(), 5)
        assert answer["response"] == {"uid": "u-1", "allowed": True}, answer
        for writer in stalled:
            writer.close()
    finally:
        await server.stop()


async def test_the_bytes_of_bodies_held_at_once_are_bounded() -> None:
    held = BodyBytes(limit=100)
    await held.take(60)
    await held.take(40)
    waiting = asyncio.create_task(held.take(10))  # past the bound: waits for a body to be done
    await asyncio.sleep(0.01)
    assert not waiting.done()
    held.give(5)
    await asyncio.sleep(0.01)
    assert not waiting.done()  # still not room for its 10
    held.give(40)
    await asyncio.wait_for(waiting, 1)
    assert held.free == 35


# was: a Go duration split into its parts by findall, which over a run of digits with no unit
# retries from every digit: quadratic (16,000 digits took 7 s, a million would take hours), so
# the review ran into its deadline and its worker stayed busy long after
async def test_a_duration_of_a_million_digits_is_refused_by_its_field(post: Post) -> None:
    obj = copy.deepcopy(VS)
    obj["spec"]["http"][0]["timeout"] = "9" * 1_000_000
    status, answer = await post(envelope(obj), "?timeout=5s")
    refused(status, answer, "field http[0].timeout: invalid duration")


# was: the API server's ``timeout`` query parsed the same way, on the event loop: a query of
# 8,000 digits (the most a request line holds) held it 0.8 s, eight of them 7 s
async def test_ready_answers_while_reviews_with_huge_timeouts_arrive(tmp_path: Path) -> None:
    async with stall.serving(tmp_path) as (rt, url, tls):
        base = url.partition("?")[0]
        body = json.dumps(envelope(VS)).encode()
        headers = {"Content-Type": "application/json"}

        async def reviews() -> list[Any]:
            async with aiohttp.ClientSession() as http:

                async def one() -> Any:
                    async with http.post(f"{base}?timeout={'9' * 8000}", data=body, headers=headers, ssl=tls) as resp:
                        return await resp.json()

                return await asyncio.gather(*(one() for _ in range(8)))

        answers, took, unanswered = await stall.probing_ready(rt, reviews())
        assert all(a["response"] == {"uid": "u-1", "allowed": True} for a in answers), answers
        assert unanswered < max(took / 5, 0.25), (took, unanswered)
