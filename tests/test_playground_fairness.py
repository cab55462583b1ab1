"""One client cannot take every playground's capacity: requests in flight and tokens a minute per client.

The REST edge is driven in-process (httpx over ASGI, one transport per client address) with a fake
predictor, so what is checked is counts of answers, not timings of a busy machine: a heavy client
whose predictions never end holds one slot, not both, and ten light clients keep being answered.
"""
from __future__ import annotations

import asyncio
import dataclasses
import threading
import time

import httpx
import pytest
from fastapi import FastAPI

from tests import playground_support as ps
from workbench.playground import service
from workbench.playground.api import build_router
from workbench.playground.limits import ClientBounds, ForwardSlots, RateLimited
from workbench.playground.runtime import Playgrounds

HEAVY_TOKENS = 64 * 512


class FakePredictor:
    """Answers at once, except a batch (the heavy client's), which holds its slot until ``release`` is set."""

    calibrated, runtime = False, "pytorch"

    def __init__(self):
        self.release = threading.Event()

    def predict_counted(self, items):
        if len(items) > 1:
            self.release.wait(30)
            return [{"label": "a", "score": 1.0}] * len(items), HEAVY_TOKENS
        return [{"label": "a", "score": 1.0}], 8


@pytest.fixture
def playground(wb, tmp_path):
    import transformers as tf

    tok = ps.tokenizer()
    folder = tmp_path / "model"
    tf.BertForSequenceClassification(ps.tiny_config(tok, num_labels=2)).save_pretrained(folder)
    tok.save_pretrained(folder)
    run_id = ps.add_run(wb, "text-classification", folder)
    return wb, service.publish(wb, run_id).slug


def serve(wb, fake, **settings):
    """The REST edge over a runtime whose predictor is ``fake``; slots give up waiting after 2 s."""
    runtime = Playgrounds(dataclasses.replace(wb, settings=dataclasses.replace(wb.settings, **settings))
                          if settings else wb)
    runtime.predictor = lambda target: fake
    runtime.slots = ForwardSlots(2, 12, max_wait_s=2.0)
    app = FastAPI()
    app.include_router(build_router(runtime))
    return runtime, app


def client(app, address: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app, client=(address, 40000)),
                             base_url="http://playground", timeout=60)


async def _hammer(app, runtime, slug, fake, heavy_requests=3, light_clients=10, light_requests=15):
    url = f"/api/v1/predict/{slug}"
    heavy_answers: list[int] = []
    light: list[tuple[int, float]] = []
    async with client(app, "10.0.0.1") as heavy:
        async def heavy_one():
            answer = await heavy.post(url, json={"inputs": ["long text"] * 64})
            heavy_answers.append(answer.status_code)
            if answer.status_code == 429:
                assert answer.json()["retry_after"] >= 1 and "already has 1 prediction" in answer.json()["error"]

        heavies = [asyncio.create_task(heavy_one()) for _ in range(heavy_requests)]
        # Every heavy request is in a slot, waiting for one, or refused before the light clients start.
        deadline = time.monotonic() + 20
        while runtime.slots.running + runtime.slots.waiting + len(heavy_answers) < heavy_requests:
            assert time.monotonic() < deadline, "the heavy requests never reached the slots"
            await asyncio.sleep(0.01)

        async def light_client(n):
            async with client(app, f"10.0.1.{n}") as own:
                for _ in range(light_requests):
                    started = time.monotonic()
                    answer = await own.post(url, json={"inputs": "one line"})
                    light.append((answer.status_code, time.monotonic() - started))

        await asyncio.gather(*(light_client(n) for n in range(light_clients)))
        fake.release.set()
        await asyncio.gather(*heavies)
    return heavy_answers, light


def test_one_heavy_client_holds_one_slot_and_ten_light_clients_keep_flowing(playground):
    wb, slug = playground
    fake = FakePredictor()
    runtime, app = serve(wb, fake)
    heavy, light = asyncio.run(_hammer(app, runtime, slug, fake))
    statuses = [status for status, _ in light]
    assert statuses.count(200) == len(light) == 150, {s: statuses.count(s) for s in set(statuses)}
    assert sorted(heavy) == [200, 429, 429]  # one in flight at a time, the others refused at once
    took = sorted(seconds for _, seconds in light)
    # A light request never waits behind the heavy one: far under the slots' 2 s wait, even on a busy machine.
    assert took[int(0.95 * len(took)) - 1] < 1.5


def test_without_the_bound_the_heavy_client_takes_both_slots(playground):
    """The same load with the in-flight bound off: what the bound prevents (so the test above can fail)."""
    wb, slug = playground
    fake = FakePredictor()
    runtime, app = serve(wb, fake, playground_max_in_flight=0)
    heavy, light = asyncio.run(_hammer(app, runtime, slug, fake, light_clients=3, light_requests=1))
    assert [status for status, _ in light] == [503, 503, 503]  # each waited its 2 s for a slot in vain
    assert heavy.count(200) == 2 and 429 not in heavy


def test_a_maximum_size_request_spends_the_token_budget(playground):
    wb, slug = playground
    fake = FakePredictor()
    fake.release.set()
    runtime, app = serve(wb, fake, playground_token_budget=20_000)

    async def go():
        async with client(app, "10.0.0.9") as heavy, client(app, "10.0.0.10") as other:
            url = f"/api/v1/predict/{slug}"
            first = await heavy.post(url, json={"inputs": ["long text"] * 64})
            second = await heavy.post(url, json={"inputs": "one line"})
            third = await other.post(url, json={"inputs": "one line"})
            return first, second, third

    first, second, third = asyncio.run(go())
    assert first.status_code == 200
    assert second.status_code == 429, second.text
    body = second.json()
    # 32,768 tokens charged to a budget of 20,000 a minute: 12,768 in debt, refilled at 333 a second.
    assert 37 <= body["retry_after"] <= 39 and second.headers["retry-after"] == str(body["retry_after"])
    assert "20,000 model tokens a minute" in body["error"]
    assert third.status_code == 200  # another address has its own budget


# ------------------------------------------------------------------ the bounds alone

def test_in_flight_bound_is_atomic_under_concurrency():
    bounds = ClientBounds(max_in_flight=1, tokens_per_minute=0)
    key = (("address", "10.0.0.1"),)
    barrier, results = threading.Barrier(32), []

    def attempt():
        barrier.wait()
        try:
            results.append(bounds.enter(key))
        except RateLimited as exc:
            results.append(exc)

    threads = [threading.Thread(target=attempt) for _ in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    admitted = [r for r in results if not isinstance(r, RateLimited)]
    assert len(admitted) == 1 and bounds.in_flight(key[0]) == 1
    assert all(r.retry_after >= 1 for r in results if isinstance(r, RateLimited))
    bounds.leave(key, admitted[0])
    assert bounds.in_flight(key[0]) == 0
    bounds.leave(key, bounds.enter(key))


def test_token_budget_goes_into_debt_and_refills():
    now = [0.0]
    bounds = ClientBounds(max_in_flight=0, tokens_per_minute=600, clock=lambda: now[0])  # 10 tokens a second
    key = (("address", "a"),)
    bounds.leave(key, bounds.enter(key), tokens=1600)  # admitted with 600 left: 1,000 in debt
    with pytest.raises(RateLimited) as refused:
        bounds.enter(key)
    assert refused.value.retry_after == 100
    now[0] = 100.5
    bounds.leave(key, bounds.enter(key), tokens=1)
    assert bounds.enter((("address", "b"),))  # another key has its own budget


def test_a_token_is_one_client_whatever_its_addresses():
    bounds = ClientBounds(max_in_flight=1, tokens_per_minute=0)
    token = ("token", "hash-of-the-token")
    started = bounds.enter((("address", "10.0.0.1"), token))
    with pytest.raises(RateLimited, match="access token"):
        bounds.enter((("address", "10.0.0.2"), token))
    assert bounds.in_flight(("address", "10.0.0.2")) == 0  # a refusal counts against no key
    bounds.leave((("address", "10.0.0.1"), token), started)
    bounds.enter((("address", "10.0.0.2"), token))


def test_client_bounds_keep_a_bounded_number_of_keys():
    now = [0.0]
    bounds = ClientBounds(max_in_flight=1, tokens_per_minute=60, max_keys=50, clock=lambda: now[0])
    for n in range(500):
        key = (("address", f"10.1.{n // 256}.{n % 256}"),)
        bounds.leave(key, bounds.enter(key), tokens=30)
        now[0] += 0.01
    assert len(bounds) <= 51
