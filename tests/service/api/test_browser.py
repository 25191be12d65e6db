"""The dashboard in a real browser (Playwright + Debian's Chromium) against the real app.

Each test starts ``quasched.service.api.app.create_app`` under uvicorn on 127.0.0.1
(a free port, a fresh SQLite database), opens the dashboard with the admin
token in the URL fragment and drives it like a user. Screenshots go to
``results/browser/`` (not committed); the map timings at 1,213 nodes to
``results/browser/timings.json``.

Never downloads a browser: the tests use ``/usr/bin/chromium`` and skip if it
(or Playwright) is missing.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from extra import needs

sync_api = needs("playwright.sync_api", "dev")
api_module = pytest.importorskip("quasched.service.api.app")

from live_server import LiveServer  # noqa: E402
from playwright.sync_api import Browser, Page, expect  # noqa: E402
from repo import REPO

from quasched.model import NodeSpec  # noqa: E402

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SHOTS = REPO / "results" / "browser"
VIEWPORT = {"width": 1440, "height": 900}
#: Chromium logs every 4xx reply; the field-error test provokes 422s on purpose
EXPECTED_CONSOLE = re.compile(r"Failed to load resource: the server responded with a status of 4\d\d")
#: the page outliving its server (a test that starts the service itself ends it first)
CLOSED_CONSOLE = re.compile(r"net::ERR_CONNECTION_REFUSED")

# a real browser
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not CHROMIUM.exists(), reason=f"no Chromium at {CHROMIUM}")]


# ---------------------------------------------------------------- clusters
def small_cluster() -> NodeSpec:
    """Two 8×A100 nodes, one 4×V100 node, four 2×T4 nodes."""
    rows = [("a100-0", 8, "A100"), ("a100-1", 8, "A100"), ("v100-0", 4, "V100"),
            ("t4-0", 2, "T4"), ("t4-1", 2, "T4"), ("t4-2", 2, "T4"), ("t4-3", 2, "T4")]
    return NodeSpec(
        name=np.array([r[0] for r in rows], dtype=object),
        cpu_milli=np.full(len(rows), 128_000, dtype=np.int64),
        memory_mib=np.full(len(rows), 1 << 20, dtype=np.int64),
        num_gpus=np.array([r[1] for r in rows], dtype=np.int64),
        gpu_model=np.array([r[2] for r in rows], dtype=object),
    )


def openb_size_cluster() -> NodeSpec:
    """1,213 openb-like nodes (the openb trace's node count; ~6,000 GPUs)."""
    from quasched.traces.synthetic import synthetic_cluster

    return synthetic_cluster(1213, seed=0)


# ---------------------------------------------------------------- fixtures
class Service:
    """A running service: its URL, admin token and an HTTP client with the token."""

    def __init__(self, url: str, token: str) -> None:
        self.url, self.token = url, token
        self.http = httpx.Client(base_url=f"{url}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=30)

    def submit(self, **body: Any) -> dict[str, Any]:
        reply = self.http.post("/jobs", json=body)
        assert reply.status_code == 201, reply.text
        return dict(reply.json())

    @property
    def dashboard(self) -> str:
        return f"{self.url}/#token={self.token}"


@contextmanager
def running_service(tmp_path: Path, cluster: NodeSpec, **kw: Any) -> Iterator[Service]:
    """The real app on ``cluster`` with a fresh database in ``tmp_path``, served until the block ends."""
    token_file = tmp_path / "quasched.token"
    app = api_module.create_app(f"sqlite:///{tmp_path / 'quasched.db'}", cluster, token_file=token_file, **kw)
    with LiveServer(app) as url:
        service = Service(url, token_file.read_text().strip())
        try:
            yield service
        finally:
            service.http.close()


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    with running_service(tmp_path, small_cluster()) as s:
        yield s


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport=VIEWPORT, device_scale_factor=1, service_workers="block")
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    pg.on("console", lambda m: errors.append(f"console {m.type}: {m.text}")
          if m.type == "error" and not EXPECTED_CONSOLE.search(m.text) and not CLOSED_CONSOLE.search(m.text)
          else None)
    # nothing may leave 127.0.0.1 (no CDN, no fonts)
    outside: list[str] = []
    pg.route(re.compile(r"^(?!http://127\.0\.0\.1:).*"), lambda route: (outside.append(route.request.url),
                                                                        route.abort()))
    yield pg
    context.close()
    assert not outside, f"requests left the machine: {outside}"
    assert not errors, errors


def shot(page: Page, name: str, **kw: Any) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path), **kw)
    return path


def open_dashboard(page: Page, service: Service) -> None:
    page.goto(service.dashboard)
    expect(page.locator("#live")).to_have_text("live")
    wait_until(page, "window.quasched && window.quasched.metrics.firstMapMs !== null")


def wait_until(page: Page, expression: str, arg: Any = None, timeout: float = 30.0) -> None:
    """Poll ``expression`` until it is truthy: ``page.evaluate`` runs outside the page's Content-Security-Policy,
    which forbids the string evaluation ``page.wait_for_function`` needs."""
    deadline = time.monotonic() + timeout
    while not page.evaluate(expression, arg):
        assert time.monotonic() < deadline, f"still false after {timeout} s: {expression}"
        page.wait_for_timeout(50)


def tab(page: Page, name: str) -> None:
    page.get_by_role("tab", name=re.compile(f"^{name}")).click()


def cell_rgb(page: Page, node: str, device: int) -> list[int]:
    """The colour drawn near the bottom of a device cell (where any fill starts)."""
    return list(page.evaluate("""([node, d]) => {
        const m = window.quasched.map, r = m.cellRect(node, d), k = window.devicePixelRatio || 1;
        const px = m.ctx.getImageData(Math.floor((r.x + r.w / 2) * k), Math.floor((r.y + r.h - 1.5) * k), 1, 1).data;
        return [px[0], px[1], px[2]];
    }""", [node, device]))


def map_used(page: Page, node: str) -> list[int]:
    return list(page.evaluate("(n) => window.quasched.map.nodes.find((x) => x.name === n).gpu_used_milli", node))


def fill_form(page: Page, **fields: str) -> None:
    form = page.locator("#submit-form")
    for name, value in fields.items():
        el = form.locator(f"[name={name}]")
        if el.evaluate("e => e.tagName") == "SELECT":
            el.select_option(value)
        else:
            el.fill(value)


# ---------------------------------------------------------------- tests
def test_token_from_fragment_is_stored_and_stripped(service: Service, page: Page) -> None:
    open_dashboard(page, service)
    assert "token" not in page.url
    assert page.evaluate("localStorage.getItem('quasched.token')") == service.token
    expect(page.locator("#kpi-nodes")).to_have_text("7")
    expect(page.locator("#kpi-gpus")).to_have_text("28")
    page.reload()  # the stored token still works without the fragment
    expect(page.locator("#live")).to_have_text("live")


def test_token_box_when_the_url_has_none(service: Service, page: Page) -> None:
    page.goto(service.url)
    expect(page.locator("#banner")).to_contain_text("token")
    expect(page.locator("#token-form")).to_be_visible()
    page.locator("#token-input").fill("not-a-token")
    page.get_by_role("button", name="Use token").click()
    expect(page.locator("#banner")).to_contain_text("rejected")
    page.locator("#token-input").fill(service.token)
    page.get_by_role("button", name="Use token").click()
    expect(page.locator("#live")).to_have_text("live")
    expect(page.locator("#kpi-gpus")).to_have_text("28")
    expect(page.locator("#banner")).to_be_hidden()


def test_live_updates_are_throttled(service: Service, page: Page) -> None:
    open_dashboard(page, service)
    tab(page, "Jobs")
    wait_until(page, "window.quasched.metrics.refreshes >= 1")
    start = page.evaluate("[window.quasched.metrics.refreshes, performance.now()]")
    for k in range(40):  # a burst of events: 40 submissions, 80 events
        service.submit(name=f"burst-{k}", team="default", cpu=1, memory="1GiB", gpus=0.25)
    expect(page.locator("#running-table tbody tr")).to_have_count(40)
    end = page.evaluate("[window.quasched.metrics.refreshes, performance.now()]")
    refreshes, seconds = end[0] - start[0], (end[1] - start[1]) / 1000
    assert refreshes <= 2 * seconds + 2, (refreshes, seconds)


def test_submit_through_form_fills_the_map_and_the_queue(service: Service, page: Page) -> None:
    open_dashboard(page, service)
    expect(page.locator("#kpi-free")).to_have_text("28")
    expect(page.locator("#kpi-frag")).to_have_text("–")  # no job yet: no typical jobs to measure against
    expect(page.locator("#kpi-frag-box")).to_have_attribute("title", re.compile("No job submitted yet"))
    before = {(n, d): cell_rgb(page, n, d) for n in ("a100-0", "a100-1") for d in range(8)}
    tab(page, "Submit job")
    expect(page.locator("#f-gpu_model option")).to_have_count(4)  # any + A100, T4, V100
    fill_form(page, name="train-a", team="default", user="alice", cpu="8", memory="64GiB", gpus="6",
              gpu_model="A100", duration="2h")
    page.get_by_role("button", name="Submit job").click()
    result = page.locator("#submit-result")
    expect(result).to_contain_text("Submitted job #1")
    expect(result).to_contain_text("running on a100-")
    job = service.http.get("/jobs/1").json()
    (node, devices), = [(p["node"], p["devices"]) for p in job["placement"]]
    assert len(devices) == 6

    tab(page, "Cluster")
    wait_until(page, "(n) => window.quasched.map.nodes.find((x) => x.name === n)"
                     ".gpu_used_milli.filter((u) => u === 1000).length === 6", arg=node)
    assert sorted(d for d, u in enumerate(map_used(page, node)) if u == 1000) == sorted(devices)
    for d in range(8):
        now = cell_rgb(page, node, d)
        if d in devices:  # filled with the model's colour: darker than the empty tint
            assert sum(now) < sum(before[node, d]) - 150, (d, before[node, d], now)
        else:
            assert now == before[node, d]
    expect(page.locator("#kpi-running")).to_have_text("1")
    expect(page.locator("#kpi-free")).to_have_text("22")
    # the typical job (6 A100s) fits only on the other A100 node: 2 + 8 T4 + 4 V100 = 14 of 22 free GPUs unusable
    expect(page.locator("#kpi-frag-box dt")).to_have_text("Unusable by typical jobs")
    expect(page.locator("#kpi-frag")).to_have_text("14 GPUs (63.6%)")
    expect(page.locator("#kpi-frag-box")).to_have_attribute(
        "title", re.compile(r"free GPU capacity that the typical jobs .* could not use.* Now 14 of 22 free GPUs\.$"))
    shot(page, "map-small")

    # hover: the tooltip names the node, its model, the per-device use and the job
    rect = page.evaluate("([n, d]) => window.quasched.map.cellRect(n, d)", [node, devices[0]])
    box = page.locator("#map").bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + rect["x"] + rect["w"] / 2, box["y"] + rect["y"] + rect["h"] / 2)
    tip = page.locator("#map-tip")
    expect(tip).to_be_visible()
    expect(tip).to_contain_text(node)
    expect(tip).to_contain_text("A100")
    expect(tip).to_contain_text("1000m")
    expect(tip).to_contain_text("train-a")
    shot(page, "map-hover")
    # click: the side panel lists the job on that device
    page.mouse.click(box["x"] + rect["x"] + rect["w"] / 2, box["y"] + rect["y"] + rect["h"] / 2)
    panel = page.locator("#node-panel")
    expect(panel).to_contain_text(f"Jobs on GPU {devices[0]}")
    expect(panel.get_by_role("link", name=re.compile("#1 train-a"))).to_be_visible()
    shot(page, "map-node-panel")
    # the job's detail outlines its devices on the map
    panel.get_by_role("link", name=re.compile("#1 train-a")).click()
    expect(page.locator("#drawer")).to_contain_text("Placement")
    expect(page.locator("#drawer")).to_contain_text("started")
    assert page.evaluate("[...window.quasched.map.highlight.get(arguments[0]) || []]".replace("arguments[0]", repr(node))) == devices
    shot(page, "map-job-highlight")
    page.keyboard.press("Escape")
    expect(page.locator("#drawer")).to_be_hidden()

    tab(page, "Jobs")
    running = page.locator("#running-table tbody")
    expect(running).to_contain_text("train-a")
    expect(running).to_contain_text("6 GPUs A100")
    expect(running).to_contain_text(node)

    # idle again: what remains is how the nodes suit the typical job (12 of 28 GPUs are not A100s), shown quietly
    assert service.http.post("/jobs/1/cancel").status_code == 200
    expect(page.locator("#kpi-running")).to_have_text("0")
    expect(page.locator("#kpi-frag")).to_have_text("12 GPUs (42.9%)")
    expect(page.locator("#kpi-frag")).to_have_class("muted")
    expect(page.locator("#kpi-frag-box")).to_have_attribute("title", re.compile("Nothing is allocated"))


def test_pending_reason_evidence_detail_and_cancel(service: Service, page: Page) -> None:
    open_dashboard(page, service)
    tab(page, "Jobs")
    # two 6-GPU jobs through the API: one per A100 node, 2 GPUs left on each; the page updates by itself
    for name in ("fill-a", "fill-b"):
        assert service.submit(name=name, team="default", cpu=4, memory="16GiB", gpus=6, gpu_model="A100")["state"] == "running"
    expect(page.locator("#running-table tbody tr")).to_have_count(2)
    expect(page.locator("#kpi-running")).to_have_text("2")

    # 4 A100 GPUs: 4 are free in total, but on no single node
    tab(page, "Submit job")
    fill_form(page, name="too-big", team="default", cpu="4", memory="16GiB", gpus="4", gpu_model="A100")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator("#submit-result")).to_contain_text("pending — Fragmented")

    tab(page, "Jobs")
    row = page.locator("#pending-table tbody tr.pending-row", has_text="too-big")
    expect(row).to_contain_text("Fragmented")
    expect(row.locator("td").first).to_have_text("1")  # queue position
    expect(page.locator("#kpi-pending")).to_have_text("1")
    row.get_by_role("button", name="evidence").click()
    expect(page.locator("#pending-table .evidence-row")).to_be_visible()
    shot(page, "jobs-pending")

    # job detail: fields, reason, events
    row.get_by_role("link", name=re.compile("too-big")).click()
    drawer = page.locator("#drawer")
    expect(drawer).to_be_visible()
    expect(drawer).to_contain_text("Why pending")
    expect(drawer).to_contain_text("Fragmented")
    expect(drawer.locator("table.events")).to_contain_text("submitted")
    shot(page, "job-detail")
    page.locator("#drawer-close").click()
    expect(drawer).to_be_hidden()

    # cancel: the first click asks for confirmation, the second cancels
    cancel = row.get_by_role("button", name=re.compile("Cancel"))
    cancel.click()
    expect(cancel).to_have_text("Confirm cancel")
    cancel.click()
    expect(page.locator("#pending-table tbody")).to_contain_text("No pending jobs")
    expect(page.locator("#finished-table tbody")).to_contain_text("cancelled")
    assert service.http.get("/jobs/3").json()["state"] == "cancelled"


def test_field_errors_show_next_to_the_fields(service: Service, page: Page) -> None:
    open_dashboard(page, service)
    tab(page, "Submit job")
    fill_form(page, name="bad", team="default", cpu="4", memory="16GiB", gpus="-1")
    page.get_by_role("button", name="Submit job").click()
    gpus_error = page.locator('[data-error-for="gpus"]')
    expect(gpus_error).to_contain_text("greater than or equal to 0")
    expect(page.locator("#f-gpus")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#submit-result")).to_have_text("Not submitted.")

    # several at once; fixing a field clears its error on the next submit
    fill_form(page, gpus="1.5", memory="lots", cpu="", duration="soon")
    page.get_by_role("button", name="Submit job").click()
    expect(gpus_error).to_contain_text("whole number")
    expect(page.locator('[data-error-for="memory"]')).not_to_be_empty()
    expect(page.locator('[data-error-for="cpu"]')).to_contain_text("required")
    expect(page.locator('[data-error-for="duration"]')).to_contain_text("duration")
    shot(page, "submit-errors", full_page=True)
    fill_form(page, gpus="0.5", memory="8GiB", cpu="2", duration="90m")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator("#submit-result")).to_contain_text("Submitted job #1")
    expect(gpus_error).to_be_empty()
    assert len(service.http.get("/jobs").json()) == 1


def test_teams_and_trends(page: Page, tmp_path: Path) -> None:
    # a clock the test moves: a few simulated hours of samples in a second
    now = [time.time() - 4 * 3600]
    with running_service(tmp_path, small_cluster(), clock=lambda: now[0]) as service:
        for name, quota in (("vision", {"A100": 8}), ("speech", {"T4": 4, "*": 2})):
            reply = service.http.put(f"/queues/{name}", json={"quota": quota, "cohort": "research"})
            assert reply.status_code == 200, reply.text
        rng = np.random.default_rng(1)
        for k in range(40):
            team = ("vision", "speech", "default")[k % 3]
            service.submit(name=f"job-{k}", team=team, cpu=2, memory="8GiB",
                           gpus=float(rng.choice([0.25, 0.5, 1, 2, 4])), duration=f"{int(rng.integers(20, 90))}m")
            now[0] += 360
            service.http.get("/queues")  # any request; the timer thread also ticks the controller
        now[0] = time.time()
        open_dashboard(page, service)
        tab(page, "Teams")
        teams = page.locator("#teams .team")
        expect(teams).to_have_count(3)
        vision = page.locator('#teams .team[data-team="vision"]')
        expect(vision.locator('.team-model[data-model="A100"]')).to_contain_text("quota 8")
        expect(vision).to_contain_text("fair share")
        speech = page.locator('#teams .team[data-team="speech"]')  # one bar per GPU model, never a sum of models
        expect(speech.locator('.team-model[data-model="T4"]')).to_contain_text("quota 4")
        expect(speech.locator('.team-model[data-model="*"]')).to_contain_text("other models")
        expect(page.locator("#kpi-frag-box dt")).to_have_text("Unusable by typical jobs")
        expect(page.locator("#kpi-frag")).to_have_text(re.compile(r"^\d+(\.\d)? GPUs \(\d+\.\d%\)$"))
        shot(page, "teams")
        tab(page, "Trends")
        expect(page.locator("#chart-alloc polyline")).to_have_count(1)
        wait_until(page, "document.querySelector('#chart-alloc polyline').getAttribute('points').split(' ').length > 5")
        expect(page.locator("#chart-queue .chart-title")).to_have_text("Pending jobs")
        shot(page, "trends")
        page.context.close()  # before the server stops (its live stream would hold the shutdown)


def test_a_standby_says_so_and_names_the_leader(page: Page, tmp_path: Path, postgres_url: str) -> None:
    token_file = tmp_path / "quasched.token"

    def server(name: str) -> Any:
        return api_module.create_app(postgres_url, small_cluster(), token_file=token_file, lease_ttl_s=3.0,
                                     advertise_url=f"http://{name}.invalid:8080")

    with LiveServer(server("leader")), LiveServer(server("standby")) as standby_url:
        service = Service(standby_url, token_file.read_text().strip())
        page.goto(service.dashboard)
        expect(page.locator("#live")).to_have_text("standby")
        banner = page.locator("#banner")
        expect(banner).to_contain_text("This server is a standby: it schedules nothing")
        expect(banner.get_by_role("link", name="http://leader.invalid:8080")).to_be_visible()
        expect(page.locator("#kpi-nodes")).to_have_text("7")  # it still shows the cluster, as the database has it
        shot(page, "standby")
        page.context.close()
        service.http.close()


def test_map_of_1213_nodes_renders_fast(page: Page, tmp_path: Path) -> None:
    with running_service(tmp_path, openb_size_cluster()) as service:
        rng = np.random.default_rng(7)
        for k in range(80):  # some occupancy: gangs of whole and shared GPUs
            service.submit(name=f"load-{k}", team="default", cpu=2, memory="8GiB",
                           gpus=float(rng.choice([0.2, 0.5, 1, 1, 2, 4, 8])), pods=int(rng.integers(1, 9)))
        for node, device in (("syn-node-0005", 3), ("syn-node-0700", 0)):
            assert service.http.put(f"/nodes/{node}/devices/{device}", json={"healthy": False}).status_code == 200
        assert service.http.patch("/nodes/syn-node-0010", json={"cordoned": True}).status_code == 200
        snap = service.http.get("/snapshot").json()
        assert len(snap["nodes"]) == 1213

        open_dashboard(page, service)
        m = page.evaluate("window.quasched.metrics")
        renders = page.evaluate("""() => {
            const out = [];
            for (let i = 0; i < 5; i++) { const t = performance.now(); window.quasched.map.render(); out.push(performance.now() - t); }
            return out;
        }""")
        cells = page.evaluate("window.quasched.map.tiles.length")
        assert cells == 1213
        timings = {
            "nodes": 1213, "gpus": snap["gpus"],
            "load_to_map_ms": round(m["firstMapMs"], 1),  # navigation start -> first map drawn
            "snapshot_fetch_ms": round(m["snapshotFetchMs"], 1),
            "first_render_ms": round(m["mapRenderMs"], 1),
            "rerender_ms_median": round(float(np.median(renders)), 1),
        }
        SHOTS.mkdir(parents=True, exist_ok=True)
        (SHOTS / "timings.json").write_text(json.dumps(timings, indent=2) + "\n")
        print("map timings:", timings)
        assert timings["first_render_ms"] < 2000
        assert timings["rerender_ms_median"] < 2000
        assert timings["load_to_map_ms"] < 10000

        # hover stays responsive and reads the right node
        box = page.locator("#map").bounding_box()
        rect = page.evaluate("window.quasched.map.cellRect('syn-node-0005', 3)")
        assert box is not None and rect is not None
        page.mouse.move(box["x"] + rect["x"] + rect["w"] / 2, box["y"] + rect["y"] + rect["h"] / 2)
        expect(page.locator("#map-tip")).to_contain_text("syn-node-0005")
        expect(page.locator("#map-tip")).to_contain_text("unhealthy")
        # shares leave part of some GPUs free: whole free GPUs, then the shared remainder in GPUs (never a bare fraction)
        snap = service.http.get("/snapshot").json()
        shared = snap["free_gpus"] - snap["free_whole_gpus"]
        assert shared > 0
        expect(page.locator("#kpi-free")).to_have_text(f"{snap['free_whole_gpus']:,} + {shared:.1f} shared")
        expect(page.locator("#kpi-free-box")).to_have_attribute(
            "title", f"{snap['free_whole_gpus']:,} GPUs with nothing allocated, plus {shared:.1f} GPUs' worth free on "
                     f"GPUs that jobs share ({snap['free_gpus']:.1f} in all). Unhealthy GPUs are not free.")
        shot(page, "map-1213")
        page.context.close()


def test_job_log_follows_and_usage_per_team(page: Page, tmp_path: Path) -> None:
    """A job's command runs on this machine's node (v100-0): its drawer follows the log as it is written; the
    Teams view sums usage per team."""
    from accounts import command_accounts, job_python, shared_dir

    from quasched.service.loop.state import LoopOptions

    options = LoopOptions(local_node="v100-0", grace_s=1.0)
    python, jobs_dir = job_python(), shared_dir()
    with command_accounts() as accounts, running_service(tmp_path, small_cluster(), options=options, run_as=accounts,
                                                         jobs_dir=jobs_dir, state_dir=tmp_path / "state") as service:
        writes = "import time\nfor i in range(8):\n    print('step', i, 'loss', 1 / (i + 1), flush=True); time.sleep(0.4)"
        job = service.submit(name="train", team="default", cpu=2, memory="4GiB", gpus=2, gpu_model="V100",
                             command=[python, "-c", writes])
        bad = service.submit(name="crash", team="default", cpu=1, memory="1GiB", gpus=0.5, gpu_model="V100",
                             command=[python, "-c", "import sys; print('CUDA error: out of memory'); sys.exit(3)"])
        open_dashboard(page, service)
        tab(page, "Jobs")
        page.locator("#running-table").get_by_role("link", name=re.compile("train")).click()
        log = page.locator("#job-log")
        expect(log).to_contain_text("step 0")  # while it runs
        expect(page.locator("#drawer")).to_contain_text("python")
        assert "step 7" not in log.inner_text()
        expect(log).to_contain_text("step 7", timeout=15_000)
        expect(page.locator("#job-log-state")).to_have_text("complete", timeout=15_000)
        expect(page.locator("#drawer")).to_contain_text("succeeded")
        shot(page, "job-log")
        page.locator("#drawer-close").click()
        expect(page.locator("#finished-table tr", has_text="crash")).to_contain_text("exit 3")
        page.locator("#finished-table").get_by_role("link", name=re.compile("crash")).click()
        drawer = page.locator("#drawer")
        expect(drawer).to_contain_text("Why it ended")
        expect(drawer).to_contain_text("exited with code 3")
        expect(page.locator("#job-log")).to_contain_text("out of memory")
        page.locator("#drawer-close").click()
        # a command typed in the form: split as a shell would, run on this machine
        split = "async (texts) => { const f = await import('/static/format.js'); return texts.map(f.shellWords); }"
        words = page.evaluate(split, [r"""a 'b c' "d \"e\"" f\ g ''""", "open 'quote"])
        assert words == [["a", "b c", 'd "e"', "f g", ""], None]
        tab(page, "Submit job")
        fill_form(page, name="from-form", team="default", cpu="1", memory="1GiB", gpus="1", gpu_model="V100",
                  command=f"{python} -c 'print(\"typed\", \"in the form\")'", time_limit="1h")
        page.get_by_role("button", name="Submit job").click()
        expect(page.locator("#submit-result")).to_contain_text("Submitted job #3")
        shot(page, "submit-command", full_page=True)
        page.locator("#submit-result").get_by_role("link").click()
        expect(page.locator("#job-log")).to_contain_text("typed in the form", timeout=15_000)
        expect(page.locator("#drawer")).to_contain_text("1h 00m")  # the time limit
        page.locator("#drawer-close").click()
        tab(page, "Teams")
        row = page.locator('#usage tr[data-team="default"]')
        expect(row.locator("td").nth(1)).to_have_text("3")  # jobs
        usage = service.http.get("/usage").json()[0]  # all ended: 2 GPUs x ~3 s, 0.5 GPU and 1 GPU x a moment
        done = [service.http.get(f"/jobs/{i}").json() for i in (job["id"], bad["id"], 3)]
        assert usage["gpu_hours"] == pytest.approx(sum(d["gpu_hours"] for d in done)) and usage["gpu_hours"] > 0
        assert float(row.locator("td.gpu-hours").inner_text()) == pytest.approx(usage["gpu_hours"], rel=0.01)
        shot(page, "usage")
        page.context.close()  # before the server stops (its live stream would hold the shutdown)
    shutil.rmtree(jobs_dir)


def test_the_api_docs_render_from_this_server_under_its_policy(page: Page, service: Service) -> None:
    """``/docs`` is Swagger UI on the app's OpenAPI document with its assets from this server: it renders the
    operations with no request leaving the machine and no Content-Security-Policy violation (no console error)."""
    page.goto(f"{service.url}/docs")
    expect(page.locator(".opblock").first).to_be_visible(timeout=30_000)
    expect(page.locator(".opblock-summary-path", has_text="/api/v1/jobs/{job_id}/logs").first).to_be_visible()
