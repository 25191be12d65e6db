"""``quasched federate``: the federation front, a service sending jobs to member clusters by carbon."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal, Optional

import typer

from quasched.cli.common import DataDirOption, console, fail
from quasched.federation.registry import RECOMMENDED

Clock = Literal["wall", "virtual"]

if TYPE_CHECKING:
    from quasched.front.members import MemberBase
    from quasched.signals.base import Signal


def federate(
    members: Optional[Path] = typer.Option(None, help="The members file (TOML, [[member]] tables: name, kind, zone, "
                                           "pue, signal; a serve member's url, token_file, ca_file; a kubernetes "
                                           "member's kubeconfig, namespace, image); docs/federation.md."),
    db: str = typer.Option("sqlite:///quasched-front.db", help="The front's store: a SQLite file or "
                           "postgresql+psycopg://..."),
    host: str = typer.Option("127.0.0.1", help="Address to listen on."),
    port: int = typer.Option(8090, min=1, max=65535, help="Port to listen on."),
    dispatcher: str = typer.Option(RECOMMENDED, help="Dispatcher and its parameters, e.g. 'carbon-defer:tau=12'; "
                                   "`quasched policies` lists them."),
    policy: str = typer.Option("fgd", help="The placement policy the front's mirror of each member assumes."),
    name: str = typer.Option("front", help="This front's name: its client tokens on the members are NAME-<job id>."),
    carbon_dir: Optional[Path] = typer.Option(None, help="Folder of carbon_intensity_2023_hourly.csv for members with "
                                              "signal = \"file\" (else $QUASCHED_CARBON); also the fallback of live "
                                              "signals. Data: Electricity Maps (ODbL)."),
    token_file: Optional[Path] = typer.Option(None, help="Where the first start writes the admin token (default: "
                                              "beside a SQLite store, quasched-front.token)."),
    advertise_url: str = typer.Option("", help="This front's URL as a standby names it to clients (PostgreSQL)."),
    lease_ttl: float = typer.Option(5.0, min=0.5, max=600, help="Seconds the leader's lease lasts unless renewed "
                                    "(PostgreSQL: a standby takes over about this long after the leader died)."),
    clock: Clock = typer.Option("wall", help="wall: serve; virtual: a scenario of --trace through the front and real "
                                "serve members on 127.0.0.1, checked against the replay, with its figures."),
    trace: str = typer.Option("openb-default", help="With --clock virtual: the trace the scenario is drawn from."),
    data_dir: Optional[Path] = DataDirOption,
    seed: int = typer.Option(1, help="With --clock virtual: the scenario's seed (window, zones, node split, PUE)."),
    days: float = typer.Option(1.0, min=0.1, max=30, help="With --clock virtual: days of the trace replayed."),
    clusters: int = typer.Option(3, min=1, max=12, help="With --clock virtual: members (distinct zones)."),
) -> None:
    """Run the federation front: jobs submitted to it (the fields of `serve`'s, with a deadline or a slack) go to
    member clusters in grid zones where and when the dispatcher says (carbon-defer by default), and are followed to
    their end there; carbon is billed per job and team.

    Members are `quasched serve` clusters reached over their API with an admin token, or Kubernetes clusters
    running quasched as kube-scheduler's extender, reached with a kubeconfig: the front creates the jobs' pods there
    (docs/federation.md, "The federation front"). Intensities: Electricity Maps or WattTime live
    ($ELECTRICITYMAPS_API_TOKEN; $WATTTIME_USERNAME, $WATTTIME_PASSWORD), or the offline file."""
    if clock == "virtual":
        return federate_virtual(trace, data_dir, carbon_dir, seed, days, clusters, dispatcher, policy)
    if members is None:
        fail("give --members FILE (or --clock virtual)")
    import uvicorn
    from sqlalchemy.engine import make_url

    from quasched.front.api import create_front_app
    from quasched.front.front import Front, Zone
    from quasched.front.kubemember import KubeMember
    from quasched.front.members import KubeMemberConfig, Member, MemberError, ServeMember, read_members
    from quasched.front.store import FrontStore
    from quasched.service.store.leadership import LeaderHeld
    from quasched.signals.base import SignalError
    from quasched.traces.errors import TraceError

    try:
        configs = read_members(members)
        zones = [Zone(signal_of(c, carbon_dir), c.pue) for c in configs]
        clients: list[Member] = [KubeMember(c) if isinstance(c, KubeMemberConfig) else ServeMember(c) for c in configs]
        store = FrontStore(db)
        front = Front(store, clients, zones, dispatcher, policy, name)
    except (ValueError, SignalError, TraceError, MemberError) as err:
        fail(str(err))
    url = make_url(db)
    if token_file is None and url.get_backend_name() == "sqlite" and url.database:
        token_file = Path(url.database).with_name("quasched-front.token")
    if store.file_lock is not None:  # SQLite: the sole writer leads from the start, or says who holds the store
        try:
            front.lead()
        except (LeaderHeld, ValueError) as err:
            fail(str(err))
    app = create_front_app(front, token_file, advertise_url=advertise_url or f"http://{host}:{port}",
                           lease_ttl_s=lease_ttl)
    if front.new_admin_token:
        console.print(f"created admin token, written to {token_file}" if token_file else
                      f"created admin token {front.new_admin_token}")
    console.print(f"quasched federate: {len(configs)} members ({', '.join(f'{c.name} in {c.zone}' for c in configs)}), "
                  f"dispatcher {dispatcher}, http://{host}:{port}/api/v1")
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)


def signal_of(config: MemberBase, carbon_dir: Path | None) -> Signal:
    """The signal of a member's zone: the offline file, or a live provider falling back to the file if it has the
    zone."""
    from quasched.signals import ElectricityMaps, FileSignal, LiveSignal, WattTime
    from quasched.traces.carbon import load_carbon
    from quasched.traces.errors import TraceError

    if config.signal == "file":
        return FileSignal(load_carbon(config.zone, carbon_dir))
    try:
        fallback: Signal | None = FileSignal(load_carbon(config.zone, carbon_dir))
    except TraceError:
        fallback = None
    provider = ElectricityMaps() if config.signal == "electricitymaps" else WattTime()
    return LiveSignal(provider, config.signal_zone or config.zone, fallback=fallback)


def federate_virtual(trace: str, data_dir: Path | None, carbon_dir: Path | None, seed: int, days: float,
                     clusters: int, dispatcher: str, policy: str) -> None:
    """``federate --clock virtual``: a drawn scenario through the front (real serve members), against the replay and
    the offline oracle at equal misses; kg CO2e, misses and the front's decision latency."""
    import tempfile

    import numpy as np

    from quasched.cli.common import load_inputs
    from quasched.federation.evaluate import evaluate
    from quasched.federation.scenario import draw_scenario
    from quasched.front.virtual import run_virtual
    from quasched.traces.carbon import ATTRIBUTION, carbon_zones, load_carbon
    from quasched.traces.errors import TraceError

    try:
        zones = [load_carbon(z, carbon_dir) for z in carbon_zones(carbon_dir)]
        nodes, workload = load_inputs(trace, data_dir)
        scenario = draw_scenario(nodes, workload, zones, seed, clusters, 1.5, days)
    except (TraceError, ValueError) as err:
        fail(str(err))
    rows = {str(r["dispatcher"]): r for r in evaluate(scenario, ["least-loaded", dispatcher], policy, 42,
                                                      equal_to=dispatcher)}
    with tempfile.TemporaryDirectory(prefix="quasched-front-") as workdir:
        live = run_virtual(scenario, dispatcher, Path(workdir), policy)
    replayed = rows[dispatcher]
    from quasched.federation.engine import run_federation
    from quasched.federation.registry import make_dispatcher

    replay = run_federation(scenario, make_dispatcher(dispatcher), policy, 42)
    same = (live.cluster.tolist() == replay.cluster.tolist() and np.array_equal(live.released, replay.released,
                                                                                 equal_nan=True)
            and np.array_equal(live.placed, replay.placed, equal_nan=True))
    ended = np.isfinite(live.placed)
    late = int((~ended | (live.placed + scenario.duration > scenario.deadline + 1e-6)).sum())
    kg, baseline = float(np.nansum(live.kg)), float(np.nansum(live.baseline_kg))
    p50, p99 = (np.percentile(live.latency_s, q) * 1000 for q in (50, 99))
    console.print(f"{trace} seed {seed}: {len(scenario.workload):,} jobs over {days:g} days, members "
                  + ", ".join(f"{m.name} (PUE {m.pue:g})" for m in scenario.members))
    console.print(f"front ({dispatcher}, {len(scenario.members)} serve members over HTTP, virtual clock): "
                  f"{kg:,.2f} kg CO2e billed, {late} deadlines missed, decision latency p50 {p50:.1f} ms, "
                  f"p99 {p99:.1f} ms, {live.elapsed_s:.0f} s in all")
    console.print(f"against: each job at once on the least loaded member {baseline:,.2f} kg "
                  f"({100 * (1 - kg / baseline) if baseline else 0:.1f} % saved); the least-loaded dispatcher "
                  f"{float(rows['least-loaded']['carbon_job_kg']):,.2f} kg; the offline oracle at "
                  f"{int(rows['oracle']['missed'])} misses {float(rows['oracle']['carbon_job_kg']):,.2f} kg "
                  f"(front / oracle {kg / float(rows['oracle']['carbon_job_kg']):.3f}); the replay "
                  f"{float(replayed['carbon_job_kg']):,.2f} kg")
    console.print("decisions identical to `quasched federation`'s replay (member, release, start of every job): "
                  + ("[green]yes[/]" if same else "[red]NO[/]"))
    console.print(ATTRIBUTION)
    if not same:
        raise typer.Exit(1)
