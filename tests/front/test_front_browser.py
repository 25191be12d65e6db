"""The front's dashboard in a real browser (Playwright + Debian's Chromium), as serve's browser tests drive theirs
(test_browser.py: its browser and page fixtures, which fail a test on any console error or request leaving
127.0.0.1): a front over two real serve members on 127.0.0.1 with scripted zones, a job deferred to a clean hour and
one sent at once; the page shows both zones now, where each job went and why, a signal's warning, and after a job
ends the kg CO2e saved as the API counts it. Skips without Chromium (or Playwright); never downloads a browser."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from extra import needs

sync_api = needs("playwright.sync_api", "dev")

from api_support import Clock, bearer  # noqa: E402
from live_server import LiveServer  # noqa: E402
from playwright.sync_api import Page, expect  # noqa: E402
from test_browser import CHROMIUM, browser, page, shot  # noqa: E402, F401 (fixtures)
from test_front import T0, Scripted, front_of, member_jobs, members, wait_until  # noqa: E402

from quasched.front.api import create_front_app  # noqa: E402
from quasched.service.loop.state import utc  # noqa: E402

HOUR_S = 3600.0
#: the page reads the front every 5 s; a check waits past that
SEEN_MS = 15_000

# a real browser
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not CHROMIUM.exists(), reason=f"no Chromium at {CHROMIUM}")]


def fmt_kg(kg: float) -> str:
    """The page's kg CO2e (app.js, fmtKg)."""
    return f"{kg:.0f}" if abs(kg) >= 100 else f"{kg:.2f}" if abs(kg) >= 1 else f"{kg:.3f}"


def read_now(page: Page) -> None:
    """Have the page read the front now (its Refresh button) and wait until it has drawn the answer."""
    before = page.evaluate("window.quaschedFront.state.refreshes")
    page.locator("#refresh").click()
    expect(page.locator("#banner")).to_be_hidden()
    deadline_ms = SEEN_MS
    while page.evaluate("window.quaschedFront.state.refreshes") <= before:
        assert deadline_ms > 0, "the page did not read the front"
        page.wait_for_timeout(50)
        deadline_ms -= 50


def job_row(page: Page, job: dict[str, Any]) -> Any:
    return page.locator(f'#jobs-table tbody tr[data-id="{job["id"]}"]')


def test_the_front_dashboard_shows_zones_where_jobs_went_and_why_and_the_saving(tmp_path: Path, page: Page) -> None:
    # A: 500 g/kWh but 50 at hour 3 (PUE 1.0); B: 200 (PUE 1.1, so 220); the forecast is read (perfect=true)
    zones = [Scripted("A", lambda h: 50.0 if h == 3 else 500.0), Scripted("B", lambda h: 200.0)]
    with members(tmp_path, 2) as running:
        clock = Clock(T0)
        front = front_of(tmp_path, running, zones, "carbon-aware:perfect=true", clock)
        app = create_front_app(front, tmp_path / "front.token", tick_s=0.05)
        with LiveServer(app) as url:
            token = (tmp_path / "front.token").read_text().strip()
            http = httpx.Client(base_url=f"{url}/api/v1", headers=bearer(token), timeout=30)

            # the page needs no token: it takes one from the address (and strips it), or asks for one
            page.goto(f"{url}/#token={token}")
            assert "token" not in page.url
            assert page.evaluate("localStorage.getItem('quasched.token')") == token
            page.evaluate("localStorage.removeItem('quasched.token')")
            page.reload()
            expect(page.locator("#banner")).to_contain_text("token")
            page.locator("#token-input").fill(token)
            page.get_by_role("button", name="Use token").click()
            expect(page.locator("#banner")).to_be_hidden()

            body = {"team": "default", "cpu": 4, "memory": "16GiB", "gpus": 1, "duration": 3600}
            flexible = http.post("/jobs", json={**body, "name": "flexible", "slack": "6h"}).json()
            urgent = http.post("/jobs", json={**body, "name": "urgent"}).json()
            wait_until(lambda: all(http.get(f"/jobs/{j['id']}").json()["member"] for j in (flexible, urgent)))
            flexible, urgent = (http.get(f"/jobs/{j['id']}").json() for j in (flexible, urgent))
            assert (flexible["member"], flexible["release_at"], flexible["remote"]) == ("m0", T0 + 3 * HOUR_S, None)
            assert (urgent["member"], urgent["release_at"]) == ("m1", T0) and urgent["remote"] is not None
            clock.advance(10)  # the front reads its members back: the urgent job runs on m1
            wait_until(lambda: http.get(f"/jobs/{urgent['id']}").json()["state"] == "running")

            read_now(page)
            # zones: each member's intensity x PUE now, a chart of its next 24 h
            expect(page.locator('#zones-table tr[data-member="m0"] .zone-now')).to_have_text("500")
            expect(page.locator('#zones-table tr[data-member="m1"] .zone-now')).to_have_text("220")
            expect(page.locator('#zones-table tr[data-member="m0"] .zone-low')).to_have_text(
                f"50 at {utc(T0 + 3 * HOUR_S)}")
            expect(page.locator("#zone-charts figure.zone-chart")).to_have_count(2)
            expect(page.locator('#zone-charts figure[data-member="m0"] .chart-value')).to_have_text("500")
            expect(page.locator("#zone-charts polyline")).to_have_count(2)
            expect(page.locator(".zone-warning")).to_have_count(0)
            # members: up, their GPUs and use
            expect(page.locator('#members-table tr[data-member="m1"] .member-state')).to_have_text("up")
            expect(page.locator("#kpi-members")).to_have_text("2 / 2")
            expect(page.locator('#members-table tr[data-member="m1"] .member-use')).to_contain_text("1 (5.6%)")  # of 18
            # jobs: the deferred one, where, until when and why; the other sent now
            deferred = job_row(page, flexible)
            expect(deferred.locator(".job-state")).to_contain_text("deferred")
            expect(deferred.locator(".job-member")).to_have_text("m0")
            expect(deferred.locator(".job-release")).to_have_text(utc(T0 + 3 * HOUR_S))
            expect(deferred.locator(".why")).to_have_text(
                f"deferred until {utc(T0 + 3 * HOUR_S)} on m0 (A): 50 g/kWh x PUE expected then, 500 now")
            sent = job_row(page, urgent)
            expect(sent.locator(".job-state")).to_have_text("running")
            expect(sent.locator(".job-member")).to_have_text(re.compile(rf"^m1 job {urgent['remote']}$"))
            expect(sent.locator(".why")).to_have_text("to m1 (B) now: 220 g/kWh x PUE")
            expect(page.locator("#kpi-waiting")).to_have_text("1")
            expect(page.locator("#savings-total")).to_have_text("No job has ended yet.")
            shot(page, "front-dashboard")

            # the urgent job's hour is up on m1; B's signal fails at the next hour
            running[1][2].advance(3600)
            wait_until(lambda: member_jobs(*running[1][:2])[0]["state"] == "succeeded")
            zones[1].failing = True
            clock.advance(3610)
            wait_until(lambda: http.get(f"/jobs/{urgent['id']}").json()["kg"] is not None)
            urgent = http.get(f"/jobs/{urgent['id']}").json()
            carbon = http.get("/carbon").json()
            assert urgent["state"] == "succeeded" and [c["team"] for c in carbon] == ["default"]
            # by hand: one job ended, saved = its baseline (at once on the least loaded member then) - its kg
            saved = urgent["baseline_kg"] - urgent["kg"]
            assert carbon[0]["saved_kg"] == pytest.approx(saved) and saved > 0
            assert urgent["kg"] == pytest.approx(urgent["kwh"] * 220 / 1000)

            read_now(page)
            expect(page.locator('#zones-table tr[data-member="m1"] .zone-signal')).to_contain_text("B: unreachable")
            expect(page.locator('#zone-charts figure[data-member="m1"] .zone-warning')).to_contain_text("unreachable")
            expect(page.locator('#zones-table tr[data-member="m1"] .zone-now')).to_have_text("220")
            expect(job_row(page, urgent).locator(".job-state")).to_have_text("succeeded")
            expect(job_row(page, urgent).locator(".job-kg")).to_have_text(fmt_kg(urgent["kg"]))
            expect(job_row(page, urgent).locator(".job-baseline")).to_have_text(fmt_kg(urgent["baseline_kg"]))
            expect(job_row(page, flexible).locator(".job-state")).to_contain_text("deferred")
            total = page.locator("#saved-kg")
            expect(total).to_have_text(f"{fmt_kg(carbon[0]['saved_kg'])} kg CO2e saved")
            assert float(total.get_attribute("data-value") or "nan") == pytest.approx(carbon[0]["saved_kg"])
            team = page.locator('#savings-table tr[data-team="default"] .team-saved')
            expect(team).to_have_text(fmt_kg(carbon[0]["saved_kg"]))
            expect(page.locator("#kpi-saved")).to_have_text(f"{fmt_kg(carbon[0]['saved_kg'])} kg")
            shot(page, "front-dashboard-saved")
            http.close()
