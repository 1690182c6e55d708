"""`Client` and `AsyncClient` offer the same methods and give the same answers (llm's
`test_async_parity`)."""

from __future__ import annotations

import asyncio
import inspect
import re

import pytest

from recalld.client import AsyncClient, Client
from recalld.client.base import ALIASES
from recalld.client.base import METHODS as CLIENT_METHODS
from recalld.daemon.methods import METHODS as DAEMON_METHODS
from tests.pipeline.conftest import Running


def public_methods(cls: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(fn)
        for name, fn in vars(cls).items()
        if callable(fn) and not name.startswith("_") and name not in ("from_env",)
    }


def test_same_methods_and_signatures() -> None:
    sync, aio = public_methods(Client), public_methods(AsyncClient)
    assert sorted(sync) == sorted(aio)
    for name in sync:
        assert sync[name] == aio[name], name
        assert inspect.iscoroutinefunction(getattr(AsyncClient, name)), name


def test_every_socket_method_has_a_client_method() -> None:
    """A method added to the daemon without a client method (or the other way) fails here."""
    assert sorted(CLIENT_METHODS) == sorted(DAEMON_METHODS)
    wrapped = set(CLIENT_METHODS.values()) | set(ALIASES)
    for cls in (Client, AsyncClient):
        assert sorted(wrapped) == sorted(public_methods(cls).keys() - {"call", "close"}), cls


@pytest.mark.parametrize(
    ("name", "rpc"), sorted([(n, r) for r, n in CLIENT_METHODS.items()] + list(ALIASES.items()))
)
def test_client_method_calls_its_socket_method(name: str, rpc: str) -> None:
    """Each client method sends the socket method the table says (checked in its source)."""
    for cls in (Client, AsyncClient):
        source = inspect.getsource(getattr(cls, name))
        assert re.search(rf'self\.call\(\s*"{re.escape(rpc)}"', source), (cls, rpc)


async def test_same_answers(daemon: Running) -> None:
    with Client(daemon.socket) as sync:
        saved = await asyncio.to_thread(
            sync.remember, "Parity: the lighthouse keeper's log", tags=["p"]
        )
        async with daemon.client() as aio:
            # Each read counts an access in the background, so leave the counter out.
            got = [await aio.get(saved["id"]), await asyncio.to_thread(sync.get, saved["id"])]
            for chunk in got:
                chunk.pop("access_count")
            assert got[0] == got[1]
            a = await aio.search("lighthouse keeper", explain=True)
            s = await asyncio.to_thread(sync.search, "lighthouse keeper", explain=True)
            for result in (a, s):
                result["explain"].pop("timings_ms")
            assert a == s
            assert await aio.sources_list() == await asyncio.to_thread(sync.sources_list)
            assert await aio.errors() == await asyncio.to_thread(sync.errors)
            assert (await aio.config_show()) == await asyncio.to_thread(sync.config_show)

            # Links, history and forget-by-query previews (issue 8).
            other = await aio.remember("Parity: the keeper's lamp oil")
            pair = (other["id"], saved["id"])
            assert await aio.link(*pair, "related") == await asyncio.to_thread(
                sync.link, *pair, "related"
            )
            assert await aio.links(saved["id"]) == await asyncio.to_thread(sync.links, saved["id"])
            await aio.update(other["id"], importance=0.8)
            await asyncio.to_thread(sync.update, other["id"], importance=0.9)
            assert await aio.history(other["id"]) == await asyncio.to_thread(
                sync.history, other["id"]
            )
            previews = [
                await aio.forget_query("lighthouse keeper"),
                await asyncio.to_thread(sync.forget_query, "lighthouse keeper"),
            ]
            tokens = [p.pop("token") for p in previews]
            for p in previews:
                p.pop("expires_at")
            assert previews[0] == previews[1] and tokens[0] != tokens[1]
            assert await aio.unlink(*pair) == {"removed": 1}
            assert await asyncio.to_thread(sync.forget_confirm, tokens[1]) == {
                "forgotten": previews[0]["sources"],
                "skipped": [],
            }
            assert (await aio.forget_confirm(tokens[0]))["skipped"] == previews[0]["sources"]
