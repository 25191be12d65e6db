"""The front's dashboard, over HTTP: the page and its assets are served without a token under serve's security
headers, and the API fields it reads beyond the others (``/carbon``'s baseline and saving per team, ``/zones``'s
first hour) hold hand-computed values. The page in a browser: test_front_browser.py."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from api_support import Clock, bearer, live_server
from quasched.front.api import create_front_app
from quasched.front.store import Dispatch
from quasched.service.domain import JobState
from test_front import T0, Scripted, front_of, members, spec, wait_until

HOUR_S = 3600.0


def test_the_page_and_its_modules_are_served_without_a_token_under_the_dashboard_headers(tmp_path: Path) -> None:
    with members(tmp_path, 1) as running:
        front = front_of(tmp_path, running, [Scripted("A", lambda h: 100.0)])
        app = create_front_app(front, tmp_path / "front.token", tick_s=0.05)
        with live_server(app) as url:
            page = httpx.get(f"{url}/")
            assert page.status_code == 200 and "federation front" in page.text
            assert page.headers["cache-control"] == "no-cache"
            # the page's own module, and serve's modules it imports, as JavaScript, with the same policy
            for path in ("/", "/static/front/app.js", "/static/front/front.css", "/static/api.js",
                         "/static/charts.js", "/static/format.js", "/static/jobs.js", "/static/style.css"):
                r = httpx.get(f"{url}{path}")
                assert r.status_code == 200, path
                assert "script-src 'self'" in r.headers["content-security-policy"], path
                assert "frame-ancestors 'none'" in r.headers["content-security-policy"], path
                assert r.headers["x-content-type-options"] == "nosniff", path
                if path.endswith(".js"):
                    assert "javascript" in r.headers["content-type"], path
            # the API still needs its token; the docs keep their own page (no dashboard policy)
            assert httpx.get(f"{url}/api/v1/zones").status_code == 401
            assert "content-security-policy" not in httpx.get(f"{url}/docs").headers
            assert httpx.get(f"{url}/static/front/nothing.js").status_code == 404


def test_carbon_gives_each_teams_baseline_and_saving(tmp_path: Path) -> None:
    """Bills set by hand on three ended jobs of two teams (one without a baseline: it counts as its own), and one
    that has not ended (no bill, not counted)."""
    with members(tmp_path, 1) as running:
        front = front_of(tmp_path, running, [Scripted("A", lambda h: 100.0)])
        app = create_front_app(front, tmp_path / "front.token", tick_s=0.05)
        store = front.store
        bills = [("vision", 2.0, 0.5, 2.0), ("vision", 1.0, 1.25, 1.0), ("nlp", 0.5, 0.3, None), ("nlp", None, None, None)]
        for team, kwh, kg, baseline in bills:  # straight into the store: the front's loop never sees them
            job = store.insert_job(spec(team=team), 0, T0)
            store.add_dispatch(Dispatch(job.id, T0 + HOUR_S, HOUR_S))
            if kg is not None:
                job.state, job.started_at, job.finished_at = JobState.SUCCEEDED, T0, T0 + HOUR_S
            store.save_dispatch(Dispatch(job.id, T0 + HOUR_S, HOUR_S, member="m0", kwh=kwh, kg=kg,
                                         baseline_member="m0", baseline_kg=baseline), (job,))
        with live_server(app) as url:
            admin = bearer((tmp_path / "front.token").read_text().strip())
            carbon = httpx.get(f"{url}/api/v1/carbon", headers=admin).json()
    assert [c["team"] for c in carbon] == ["nlp", "vision"]
    nlp, vision = carbon
    # nlp: one bill, 0.3 kg, no baseline: its own 0.3 kg, nothing saved
    assert (nlp["jobs"], nlp["kwh"], nlp["kg"], nlp["baseline_kg"], nlp["saved_kg"]) == (1, 0.5, 0.3, 0.3, 0.0)
    # vision: 0.5 + 1.25 = 1.75 kg against 2.0 + 1.0 = 3.0 at once: 1.25 kg saved (the second cost 0.25 more)
    assert (vision["jobs"], vision["kwh"]) == (2, 3.0)
    assert vision["kg"] == pytest.approx(1.75) and vision["baseline_kg"] == pytest.approx(3.0)
    assert vision["saved_kg"] == pytest.approx(1.25)


def test_zones_say_the_hour_their_values_start(tmp_path: Path) -> None:
    zones = [Scripted("A", lambda h: 100.0 + h), Scripted("B", lambda h: 300.0)]
    with members(tmp_path, 2) as running:
        clock = Clock(T0 + 600)  # ten minutes into the front's first hour
        front = front_of(tmp_path, running, zones, clock=clock)
        app = create_front_app(front, tmp_path / "front.token", tick_s=0.05)
        with live_server(app) as url:
            admin = bearer((tmp_path / "front.token").read_text().strip())

            def zones_now() -> list[dict]:
                return list(httpx.get(f"{url}/api/v1/zones?hours=3", headers=admin).json())

            wait_until(lambda: front.observed == 0)
            a, b = zones_now()
            assert (a["start"], a["now"], a["next"]) == (T0, 100.0, [100.0, 101.0, 102.0])
            assert b["start"] == T0 and b["now"] == pytest.approx(330.0)  # 300 x PUE 1.1
            assert b["next"] == pytest.approx([330.0] * 3)
            clock.advance(HOUR_S)
            wait_until(lambda: front.observed == 1)
            a, _ = zones_now()
            assert (a["start"], a["now"], a["next"]) == (T0 + HOUR_S, 101.0, [101.0, 102.0, 103.0])
