"""The federation front against real ``quasched serve`` members on 127.0.0.1: where and when jobs go, what comes back
from the members, a member that goes away, a restart from the store, carbon billed per job and team, the API's
refusals. Zones are scripted signals with hand-set intensities."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import numpy as np
import pytest

from api_support import Clock, bearer, live_server, make_app
from quasched.front.api import create_front_app
from quasched.front.front import HOUR_S, Front, Zone
from quasched.front.members import MemberConfig, ServeMember, read_members
from quasched.front.store import FrontStore
from quasched.model.nodes import NodeSpec
from quasched.service.domain import JobState
from quasched.signals.base import Reading, SignalError, hour_of

T0 = 1_700_000_000.0 - 1_700_000_000.0 % HOUR_S  # an hour boundary


class Scripted:
    """A zone whose hour ``h`` (from T0) has intensity ``g(h)``; it fails while ``failing`` is set."""

    def __init__(self, zone: str, g: Callable[[int], float]) -> None:
        self.zone, self.g, self.failing = zone, g, False

    def _reading(self, first: int, hours: int) -> Reading:
        if self.failing:
            raise SignalError(f"{self.zone}: unreachable")
        h0 = int((first - T0) // HOUR_S)
        return Reading(self.zone, first, np.array([self.g(h0 + k) for k in range(hours)], dtype=float), None, "test")

    def hourly(self, now: float, hours: int) -> Reading:
        return self._reading(hour_of(now), hours)

    def history(self, now: float, hours: int) -> Reading:
        return self._reading(hour_of(now) - hours * int(HOUR_S), hours)


@contextlib.contextmanager
def members(tmp: Path, n: int) -> Iterator[list[tuple[str, Path, Clock]]]:
    """``n`` serve members, each on its own store and clock: (url, token file, clock)."""
    with contextlib.ExitStack() as stack:
        out = []
        for i in range(n):
            home = tmp / f"m{i}"
            home.mkdir()
            clock = Clock(T0)
            app, _ = make_app(home, clock=clock)
            out.append((stack.enter_context(live_server(app)), home / "quasched.token", clock))
        yield out


def front_of(tmp: Path, running: list[tuple[str, Path, Clock]], zones: list[Scripted], dispatcher: str = "greedy",
             clock: Clock | None = None) -> Front:
    configs = [MemberConfig(name=f"m{i}", url=url, zone=z.zone, pue=1.0 + i / 10, token_file=token)
               for i, ((url, token, _), z) in enumerate(zip(running, zones))]
    front = Front(FrontStore(f"sqlite:///{tmp / 'front.db'}"), [ServeMember(c) for c in configs],
                  [Zone(z, c.pue) for z, c in zip(zones, configs)], dispatcher, clock=clock or Clock(T0))
    front.lead()
    return front


def member_jobs(url: str, token: Path) -> list[dict[str, Any]]:
    return httpx.get(f"{url}/api/v1/jobs", headers=bearer(token.read_text().strip())).json()


def test_a_job_goes_to_the_greenest_member_with_room_and_its_state_comes_back(tmp_path: Path) -> None:
    zones = [Scripted("A", lambda h: 400.0), Scripted("B", lambda h: 100.0), Scripted("C", lambda h: 300.0)]
    with members(tmp_path, 3) as running:
        front = front_of(tmp_path, running, zones)
        job, _ = front.submit(spec(), T0 + 5 * HOUR_S, 3600.0, T0)
        front.step(T0)
        d = front.dispatch_of[front.index[job.id]]
        assert (d.member, d.release_at) == ("m1", T0)  # B, 100 × PUE 1.1, the greenest
        assert "to m1 (B) now: 110 g/kWh" in d.why
        sent = member_jobs(*running[1][:2])
        assert [(j["name"], str(j["id"])) for j in sent] == [("train", d.remote)]
        assert member_jobs(*running[0][:2]) == member_jobs(*running[2][:2]) == []
        front.step(T0 + 10)  # read back: the member placed it
        assert front.jobs[front.index[job.id]].state == JobState.RUNNING
        running[1][2].advance(3600)  # the member's clock: its duration is up
        wait_until(lambda: member_jobs(*running[1][:2])[0]["state"] == "succeeded")
        front.step(T0 + 3620)
        done = front.jobs[front.index[job.id]]
        assert done.state == JobState.SUCCEEDED
        # billed: kW of one A100-class GPU share... x 1 h x 110 g/kWh (hand check against the view's numbers)
        kw = float(front.view.kw[front.index[job.id], 1])
        assert d.kwh == pytest.approx(kw * (done.finished_at - done.started_at) / HOUR_S)
        assert d.kg == pytest.approx(d.kwh * 110.0 / 1000)
        # against running it at once on the least loaded member (all empty: the first), A at 400 g/kWh, PUE 1.0
        assert d.baseline_member == "m0"
        assert d.baseline_kg == pytest.approx(float(front.view.kw[front.index[job.id], 0]) * 1.0 * 400.0 / 1000)
        front.stop()


def spec(**kw: Any) -> Any:
    from quasched.service.runtime.schemas import JobSubmit
    body = {"name": "train", "team": "default", "cpu": 4, "memory": "16GiB", "gpus": 1, "duration": 3600}
    body.update(kw)
    return JobSubmit.model_validate(body).to_spec()


def wait_until(condition: Callable[[], bool], timeout_s: float = 15.0) -> None:
    import time
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


def test_a_flexible_job_is_deferred_to_the_clean_hour_and_sent_then(tmp_path: Path) -> None:
    """With the provider's forecast read (``perfect=true``: the hours after now hold the signal's forecast), a job
    with 6 h of slack waits for hour 3, when A drops from 500 to 50 g/kWh; one without slack starts now on B."""
    zones = [Scripted("A", lambda h: 50.0 if h == 3 else 500.0), Scripted("B", lambda h: 200.0)]
    with members(tmp_path, 2) as running:
        clock = Clock(T0)
        front = front_of(tmp_path, running, zones, "carbon-aware:perfect=true", clock)
        flexible, _ = front.submit(spec(name="flexible"), T0 + 7 * HOUR_S, 3600.0, T0)
        urgent, _ = front.submit(spec(name="urgent"), T0 + 3600.0, 3600.0, T0)
        front.step(T0)
        d = front.dispatch_of[front.index[flexible.id]]
        assert (d.member, d.release_at, d.remote) == ("m0", T0 + 3 * HOUR_S, None)
        assert d.why.startswith("deferred until") and "50 g/kWh x PUE expected then, 500 now" in d.why
        u = front.dispatch_of[front.index[urgent.id]]
        assert (u.member, u.release_at) == ("m1", T0) and u.remote is not None
        front.step(T0 + 3 * HOUR_S - 1)
        assert d.remote is None and member_jobs(*running[0][:2]) == []
        front.step(T0 + 3 * HOUR_S)
        assert [j["name"] for j in member_jobs(*running[0][:2])] == ["flexible"]
        front.stop()


def test_a_member_that_goes_away_gets_no_new_jobs_and_nothing_runs_twice(tmp_path: Path) -> None:
    zones = [Scripted("A", lambda h: 100.0), Scripted("B", lambda h: 300.0)]
    with contextlib.ExitStack() as stack:
        homes = []
        servers = []
        for i in range(2):
            home = tmp_path / f"m{i}"
            home.mkdir()
            app, _ = make_app(home, clock=Clock(T0))
            servers.append(stack.enter_context(contextlib.ExitStack()))
            homes.append((servers[-1].enter_context(live_server(app)), home / "quasched.token", Clock(T0)))
        front = front_of(tmp_path, homes, zones)
        first, _ = front.submit(spec(name="first"), T0 + 5 * HOUR_S, 3600.0, T0)
        front.step(T0)
        assert front.dispatch_of[front.index[first.id]].member == "m0"
        servers[0].close()  # the green member goes away
        front.step(T0 + 10)
        assert not front.sites[0].up and "m0" in front.sites[0].error
        second, _ = front.submit(spec(name="second"), T0 + 5 * HOUR_S, 3600.0, T0 + 20)
        front.step(T0 + 20)
        assert front.dispatch_of[front.index[second.id]].member == "m1"
        assert [j["name"] for j in member_jobs(*homes[1][:2])] == ["second"]
        kinds = [e.kind for e in front.store.events()]
        assert "member-down" in kinds
        note = front.unreachable("m0")  # its job is reported as last known, not sent elsewhere
        assert note.startswith("member m0 has not answered since") and "its last known state" in note
        assert front.dispatch_of[front.index[first.id]].member == "m0" and front.unreachable("m1") == ""
        front.stop()


def test_the_front_restarts_from_its_store_without_sending_a_job_twice(tmp_path: Path) -> None:
    zones = [Scripted("A", lambda h: 50.0 if h >= 2 else 500.0), Scripted("B", lambda h: 400.0)]
    with members(tmp_path, 2) as running:
        front = front_of(tmp_path, running, zones, "carbon-aware:perfect=true")
        sent, _ = front.submit(spec(name="now"), T0 + 3600.0, 3600.0, T0)
        later, _ = front.submit(spec(name="later"), T0 + 6 * HOUR_S, 3600.0, T0)
        front.step(T0)
        assert front.dispatch_of[front.index[sent.id]].remote is not None
        assert front.dispatch_of[front.index[later.id]].remote is None
        front.stop()
        front.store.close()  # as after a crash (the process's lock goes with it): the store holds what was decided
        again = front_of(tmp_path, running, zones, "carbon-aware:perfect=true", Clock(T0 + 60))
        assert sorted(again.index) == sorted([sent.id, later.id])
        again.step(T0 + 60)
        again.step(T0 + 2 * HOUR_S + 60)
        names = sorted(j["name"] for r in running for j in member_jobs(*r[:2]))
        assert names == ["later", "now"]  # each sent once
        assert again.jobs[again.index[sent.id]].state == JobState.RUNNING
        # a resubmission with the same client token is the first job
        token = spec(name="now", client_token="t-1")
        one, _ = again.submit(token, T0 + 3 * HOUR_S, 3600.0, T0 + 2 * HOUR_S + 60)
        two, _ = again.submit(token, T0 + 3 * HOUR_S, 3600.0, T0 + 2 * HOUR_S + 60)
        assert one.id == two.id
        again.stop()


def test_a_signal_that_fails_keeps_the_last_hour_with_a_warning(tmp_path: Path) -> None:
    zones = [Scripted("A", lambda h: 100.0 + h), Scripted("B", lambda h: 300.0)]
    with members(tmp_path, 2) as running:
        front = front_of(tmp_path, running, zones)
        front.step(T0)
        zones[0].failing = True
        front.step(T0 + HOUR_S)
        # hour 1 keeps what the reading at hour 0 forecast for it (101, PUE 1.0); hour 0 is unchanged
        assert (front.view.intensity[0, 0], front.view.intensity[0, 1]) == (100.0, 101.0)
        assert "unreachable" in front.warnings["A"]
        zones[0].failing = False
        front.step(T0 + 2 * HOUR_S)
        assert front.view.intensity[0, 2] == 102.0 and "A" not in front.warnings
        front.stop()


def test_the_members_file_is_checked_field_by_field(tmp_path: Path) -> None:
    good = tmp_path / "members.toml"
    good.write_text('[[member]]\nname = "north"\nurl = "https://127.0.0.1:8443"\nzone = "SE"\npue = 1.2\n'
                    'token_file = "/tmp/t"\n')
    assert [m.name for m in read_members(good)] == ["north"]
    bad = tmp_path / "bad.toml"
    bad.write_text('[[member]]\nname = "north"\nurl = "https://127.0.0.1:8443"\nzone = "SE"\npue = 0.5\n'
                   'token_file = "/tmp/t"\n')
    with pytest.raises(ValueError, match=r"bad.toml: member 1 \(north\): pue: "):
        read_members(bad)
    twice = tmp_path / "twice.toml"
    twice.write_text(good.read_text() * 2)
    with pytest.raises(ValueError, match="'north' is listed twice"):
        read_members(twice)
    unknown = tmp_path / "unknown.toml"
    unknown.write_text(good.read_text().replace("pue", "puee"))
    with pytest.raises(ValueError, match="puee"):
        read_members(unknown)


def test_the_api_refuses_what_a_team_may_not_do(tmp_path: Path) -> None:
    zones = [Scripted("A", lambda h: 100.0)]
    with members(tmp_path, 1) as running:
        front = front_of(tmp_path, running, zones)
        app = create_front_app(front, tmp_path / "front.token", tick_s=0.05)
        with live_server(app) as url:
            admin = bearer((tmp_path / "front.token").read_text().strip())
            made = httpx.post(f"{url}/api/v1/tokens", json={"name": "vision", "team": "vision"}, headers=admin)
            team = bearer(made.json()["token"])
            body = {"name": "train", "team": "default", "cpu": 4, "memory": "16GiB", "gpus": 1, "duration": 600}
            assert httpx.post(f"{url}/api/v1/jobs", json=body, headers=team).status_code == 403
            assert httpx.post(f"{url}/api/v1/jobs", json=body).status_code == 401
            no_run = {k: v for k, v in body.items() if k != "duration"}
            answer = httpx.post(f"{url}/api/v1/jobs", json=no_run, headers=admin)
            assert answer.status_code == 422 and "duration" in answer.text
            both = {**body, "slack": "2h", "deadline": T0 + 10 * HOUR_S}
            assert httpx.post(f"{url}/api/v1/jobs", json=both, headers=admin).status_code == 422
            huge = {**body, "name": "x" * (2 << 20)}
            assert httpx.post(f"{url}/api/v1/jobs", json=huge, headers=admin).status_code in (413, 422)
            ok = httpx.post(f"{url}/api/v1/jobs", json={**body, "slack": "1h"}, headers=admin)
            assert ok.status_code == 201, ok.text
            job = ok.json()
            assert job["deadline"] == pytest.approx(front.clock() + 3600 + 600)
            wait_until(lambda: httpx.get(f"{url}/api/v1/jobs/{job['id']}", headers=team).json()["member"] == "m0")
            assert httpx.post(f"{url}/api/v1/jobs/{job['id']}/cancel", headers=team).status_code == 403
            members_now = httpx.get(f"{url}/api/v1/members", headers=team).json()
            assert [(m["name"], m["zone"], m["up"]) for m in members_now] == [("m0", "A", True)]
            zones_now = httpx.get(f"{url}/api/v1/zones", headers=team).json()
            assert zones_now[0]["now"] == 100.0


class LosesAnswers(httpx.HTTPTransport):
    """The member's real transport, which loses the answer to the first ``lose`` job submissions: the member took
    them, the front cannot know (as when the network fails after the request arrived)."""

    def __init__(self, lose: int) -> None:
        super().__init__()
        self.lose = lose

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if request.method == "POST" and request.url.path.endswith("/jobs") and self.lose > 0:
            self.lose -= 1
            response.read()
            raise httpx.ReadTimeout("the answer was lost", request=request)
        return response


def test_a_job_whose_answer_was_lost_is_sent_again_to_the_same_member_and_runs_once(tmp_path: Path) -> None:
    zones = [Scripted("A", lambda h: 100.0), Scripted("B", lambda h: 300.0)]
    with members(tmp_path, 2) as running:
        configs = [MemberConfig.model_validate({"name": f"m{i}", "url": url, "zone": z.zone, "token_file": token})
                   for i, ((url, token, _), z) in enumerate(zip(running, zones))]
        lossy = ServeMember(configs[0], transport=LosesAnswers(1))
        front = Front(FrontStore(f"sqlite:///{tmp_path / 'front.db'}"), [lossy, ServeMember(configs[1])],
                      [Zone(z, 1.0) for z in zones], "greedy", clock=Clock(T0))
        front.lead()
        job, _ = front.submit(spec(), T0 + 5 * HOUR_S, 3600.0, T0)
        front.step(T0)  # the answer is lost: the job stays m0's and is sent again there (the rules' wait), not elsewhere
        d = front.dispatch_of[front.index[job.id]]
        on_m0 = member_jobs(*running[0][:2])
        assert [j["name"] for j in on_m0] == ["train"] and member_jobs(*running[1][:2]) == []
        assert (d.member, d.remote) == ("m0", str(on_m0[0]["id"]))  # the resend got the first job back
        assert lossy.http._transport.lose == 0  # type: ignore[attr-defined]
        front.stop()


def test_a_front_that_died_between_sending_and_storing_the_answer_sends_to_the_same_member(tmp_path: Path) -> None:
    zones = [Scripted("A", lambda h: 100.0), Scripted("B", lambda h: 300.0)]
    with members(tmp_path, 2) as running:
        front = front_of(tmp_path, running, zones)
        job, _ = front.submit(spec(), T0 + 5 * HOUR_S, 3600.0, T0)
        saves = front.store.save_dispatch

        def dies_after_the_intent(dispatch: Any, *rest: Any) -> None:
            if dispatch.remote is not None:
                raise SystemExit("the front dies")
            saves(dispatch, *rest)

        front.store.save_dispatch = dies_after_the_intent  # type: ignore[method-assign]
        with pytest.raises(SystemExit):
            front.step(T0)
        front.store.close()
        zones.reverse()  # B is greener now: a front deciding afresh would send it to m1
        again = front_of(tmp_path, running, [Scripted("A", lambda h: 300.0), Scripted("B", lambda h: 100.0)],
                         clock=Clock(T0 + 60))
        again.step(T0 + 60)
        d = again.dispatch_of[again.index[job.id]]
        assert d.member == "m0" and d.remote == str(member_jobs(*running[0][:2])[0]["id"])
        assert len(member_jobs(*running[0][:2])) == 1 and member_jobs(*running[1][:2]) == []
        again.stop()


def test_a_jobs_output_is_read_from_its_member_by_its_team_only(tmp_path: Path) -> None:
    """A command job on a serve member that runs commands (its node ``box`` is this machine): the front reads its
    output from the member for the job's team and admins; another team's token is refused (403)."""
    from accounts import command_accounts, shared_dir
    from quasched.service.loop.state import LoopOptions
    from quasched.service.runtime.schemas import JobSubmit

    box = NodeSpec(np.array(["box"], dtype=object), np.array([8000]), np.array([32768]), np.array([2]),
                   np.array(["T4"], dtype=object))
    with command_accounts("front") as accounts, contextlib.ExitStack() as stack:
        home = tmp_path / "m0"
        home.mkdir()
        app, _ = make_app(home, cluster=box, options=LoopOptions(local_node="box", grace_s=1.0), run_as=accounts,
                          jobs_dir=shared_dir(), state_dir=home / "state")
        url = stack.enter_context(live_server(app))
        front = front_of(tmp_path, [(url, home / "quasched.token", Clock(T0))], [Scripted("A", lambda h: 100.0)])
        spec = JobSubmit.model_validate({"name": "hello", "team": "default", "cpu": 1, "memory": "1GiB",
                                         "command": ["/bin/sh", "-c", "echo hello from the member"],
                                         "time_limit": 600}).to_spec()
        job, _ = front.submit(spec, T0 + 3600, 600.0, T0)
        front.step(T0)
        assert front.dispatch_of[front.index[job.id]].remote is not None
        api = create_front_app(front, tmp_path / "front.token", tick_s=0.05)
        with live_server(api) as front_url:
            admin = bearer((tmp_path / "front.token").read_text().strip())
            other = bearer(httpx.post(f"{front_url}/api/v1/tokens", json={"name": "v", "team": "vision"},
                                      headers=admin).json()["token"])
            wait_until(lambda: "hello from the member" in httpx.get(f"{front_url}/api/v1/jobs/{job.id}/logs",
                                                                    headers=admin).text)
            assert httpx.get(f"{front_url}/api/v1/jobs/{job.id}/logs", headers=other).status_code == 403
            assert httpx.get(f"{front_url}/api/v1/jobs/999/logs", headers=admin).status_code == 404


def test_members_are_called_over_tls_checked_against_their_ca(tmp_path: Path) -> None:
    """A member behind TLS (a certificate for 127.0.0.1 from its own CA): with ``ca_file`` the front submits to it
    (its token travels encrypted); without it the member's certificate is refused, naming the member."""
    import subprocess

    certs = tmp_path / "tls"
    subprocess.run(["bash", str(Path(__file__).parents[2] / "deploy" / "extender-certs.sh"), str(certs)], check=True,
                   capture_output=True)
    home = tmp_path / "m0"
    home.mkdir()
    app, _ = make_app(home, clock=Clock(T0))
    with live_server(app, tls=(certs / "server.crt", certs / "server.key")) as url:
        assert url.startswith("https://")
        good = MemberConfig.model_validate({"name": "m0", "url": url, "zone": "A", "token_file": home / "quasched.token",
                                            "ca_file": certs / "ca.crt"})
        front = Front(FrontStore(f"sqlite:///{tmp_path / 'front.db'}"), [ServeMember(good)],
                      [Zone(Scripted("A", lambda h: 100.0), 1.0)], "greedy", clock=Clock(T0))
        front.lead()
        job, _ = front.submit(spec(), T0 + 5 * HOUR_S, 3600.0, T0)
        front.step(T0)
        assert front.dispatch_of[front.index[job.id]].remote is not None
        front.stop()
        unchecked = MemberConfig.model_validate({"name": "m0", "url": url, "zone": "A",
                                                 "token_file": home / "quasched.token"})
        with pytest.raises(ValueError, match=r"member m0: GET /nodes: ConnectError: .*CERTIFICATE_VERIFY_FAILED"):
            Front(FrontStore(f"sqlite:///{tmp_path / 'other.db'}"), [ServeMember(unchecked)],
                  [Zone(Scripted("A", lambda h: 100.0), 1.0)], "greedy", clock=Clock(T0))
