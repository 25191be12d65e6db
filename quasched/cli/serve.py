"""``quasched serve``: the scheduler service (HTTP API, dashboard, metrics, optionally the
kube-scheduler extender) on a wall clock, or with ``--clock virtual`` its loop driven by a trace and
checked against ``quasched replay``."""

from __future__ import annotations

import signal
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Optional

import typer

from quasched.cli.client import TOKEN_FILE
from quasched.cli.common import Rng, console, fail, finite_number, load_inputs, native_seed
from quasched.report.wording import counted
from quasched.service.domain import DEFAULT_POLICY

if TYPE_CHECKING:
    from quasched.kube.tls import VerbsTLS
    from quasched.model.nodes import NodeSpec

Clock = Literal["wall", "virtual"]
Order = Literal["fair", "fifo"]
BatchSolver = Literal["milp", "qubo-sa", "qaoa", "greedy"]


def log_bytes(value: str, option: str) -> str:
    """A log cap (``64MiB``, at least 1 MiB) in bytes (as text: typer keeps the option's type)."""
    from quasched.traces.units import parse_memory

    try:
        mib = parse_memory(value)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint=option) from None
    if mib < 1:
        raise typer.BadParameter(f"{value!r} is less than 1MiB", param_hint=option)
    return str(mib << 20)


def serve_virtual(trace: str, spec: str, seed: int, rng: Rng, data_dir: Path | None, cluster_file: Path | None) -> None:
    """``serve --clock virtual``: the service's loop driven by a trace under policy ``spec``, compared with the
    replay."""
    import numpy as np

    from quasched.service.loop.virtual import run_virtual
    from quasched.sim.replay import run_replay

    nodes, workload = load_inputs(trace, data_dir, cluster_file)
    start = time.perf_counter()
    try:
        served = run_virtual(nodes, workload, spec, seed, rng=rng)
    except ValueError as err:
        fail(str(err))
    elapsed = time.perf_counter() - start
    replayed = run_replay(nodes, workload, spec, seed, rng=rng)
    names = np.array([nodes.name[n] if n >= 0 else "" for n in replayed.pods.node], dtype=object)
    same = bool((names == served.node).all()) and np.array_equal(
        np.nan_to_num(replayed.pods.placed, nan=-1), np.nan_to_num(served.started, nan=-1))
    started = int(np.isfinite(served.started).sum())
    console.print(f"[bold]{trace}[/] through the service loop ({spec}, seed {seed}, virtual clock): "
                  f"{started:,} of {len(workload):,} jobs started, {served.events:,} events, {elapsed:.1f} s")
    console.print("placements identical to `quasched replay` (node and start time of every pod): "
                  + ("[green]yes[/]" if same else "[red]NO[/]"))
    if not same:
        raise typer.Exit(1)


def this_machine(name: str) -> NodeSpec | None:
    """This machine as a one-node cluster when NVML sees its GPUs (named ``name`` or the host name), else None."""
    import socket

    from quasched.service.executor.localnode import nvml_record
    from quasched.service.loop.controller import nodes_of

    record = nvml_record(name or socket.gethostname().split(".")[0])
    return None if record is None else nodes_of([record])


def kube_verbs_tls(cert: Path | None, key: Path | None, client_ca: Path | None, host: str, port: int,
                   plain_http: bool) -> VerbsTLS | None:
    """The verbs' mutual-TLS listener of ``--kube-tls-*`` (None with ``--kube-plain-http``); exits naming what is
    missing or unreadable."""
    from quasched.kube.tls import VerbsTLS

    given = {"--kube-tls-cert": cert, "--kube-tls-key": key, "--kube-client-ca": client_ca}
    if plain_http:
        if any(given.values()):
            fail("--kube-plain-http and --kube-tls-cert/--kube-tls-key/--kube-client-ca exclude each other")
        return None
    absent = [flag for flag, value in given.items() if value is None]
    if absent:
        fail("--kube-extender serves the verbs over mutual TLS: give " + ", ".join(absent)
             + " (deploy/extender-certs.sh makes them), or --kube-plain-http for an unauthenticated test set-up")
    assert cert is not None and key is not None and client_ca is not None
    tls = VerbsTLS(host, port, cert, key, client_ca)
    try:
        tls.check()
    except (OSError, ValueError) as err:  # ssl.SSLError is an OSError
        fail(f"--kube-tls-cert/--kube-tls-key/--kube-client-ca: cannot load: {err}")
    return tls


def database_url(db: str) -> str:
    """A SQLAlchemy URL; a plain path means a SQLite file."""
    return db if "://" in db else f"sqlite:///{db}"


def serve(
    host: str = typer.Option("127.0.0.1", help="Address to listen on (0.0.0.0 = every interface)."),
    port: int = typer.Option(8080, min=1, max=65535, help="TCP port."),
    db: str = typer.Option("sqlite:///quasched.db", help="Database: a SQLAlchemy URL (SQLite, PostgreSQL) or a file."),
    cluster_file: Optional[Path] = typer.Option(None, "--cluster", show_default=False, help=(
        "Cluster file for the first start (default: the built-in 120-node cluster).")),
    policy: str = typer.Option(DEFAULT_POLICY, help="Placement policy; `quasched policies` lists them."),
    clock: Clock = typer.Option("wall", help="'virtual': drive the loop by --trace at full speed, check vs replay."),
    trace: str = typer.Option("synthetic", help="With --clock virtual: the trace."),
    seed: int = typer.Option(42, help="With --clock virtual: seed of the node tie-break ranks."),
    rng: Rng = typer.Option("native", help="With --clock virtual: 'native' (NumPy) or 'go' (the FGD artifact's)."),
    data_dir: Optional[Path] = typer.Option(None, help="With --clock virtual: the traces' folder ($QUASCHED_DATA)."),
    order: Order = typer.Option("fair", help="Queue order: 'fair' (priority, fair share, decay) or 'fifo'."),
    decay_alpha: Optional[float] = typer.Option(None, min=0, max=1, help="A user's k-th pending job weighs "
                                                "alpha^(k-1) (default off)."),
    grace: float = typer.Option(30.0, min=0, callback=finite_number, help="Seconds a stopped job gets to end."),
    preemption: bool = typer.Option(True, help="Preempt for priority and to reclaim lent quota."),
    defrag_per_hour: int = typer.Option(0, min=0, help="Job swapping: migrations per hour at most (0 = off)."),
    batch_solver: Optional[BatchSolver] = typer.Option(None, help="Batch mode: assign the pending batch with this "
                                                       "solver."),
    metrics_public: bool = typer.Option(False, "--metrics-public", help="Serve /metrics without a token."),
    local_node: str = typer.Option("", show_default=False, help=(
        "The node that is this machine, where commands run (default: the host's name, or the only node).")),
    state_dir: Optional[Path] = typer.Option(None, show_default=False, help=(
        "Jobs' logs and run records (default: quasched-state beside a SQLite database).")),
    run_as: list[str] = typer.Option([], "--run-as", show_default=False, rich_help_panel="Commands", help=(
        "TEAM=USER: TEAM's commands run as this unprivileged user (TEAM '*': any team not named; repeatable).")),
    run_as_file: Optional[Path] = typer.Option(None, show_default=False, rich_help_panel="Commands", help=(
        "A file of 'TEAM USER' lines, as --run-as.")),
    run_as_self: bool = typer.Option(False, "--run-as-self", rich_help_panel="Commands", help=(
        "Single-user set-up: every command runs as the service's own account (never root).")),
    jobs_dir: Optional[Path] = typer.Option(None, show_default=False, rich_help_panel="Commands", help=(
        "Where each job gets its own working directory (default: quasched-jobs beside the state directory).")),
    log_cap: str = typer.Option("64MiB", callback=lambda v: log_bytes(v, "--log-cap"), rich_help_panel="Commands",
                                help="A job's log keeps its first half and its last half of this (binary units)."),
    team_log_cap: str = typer.Option("1GiB", callback=lambda v: log_bytes(v, "--team-log-cap"),
                                     rich_help_panel="Commands", help=(
        "Past this, the logs of a team's oldest finished jobs are removed.")),
    gpu_hot: float = typer.Option(85.0, min=30, max=120, callback=finite_number, help=(
        "New pods avoid a GPU this hot (C, NVML) until 5 C cooler.")),
    advertise_url: str = typer.Option("", show_default=False, help=(
        "This server's URL as standbys name it (default: http://HOST:PORT).")),
    lease_ttl: float = typer.Option(5.0, min=0.5, max=300, callback=finite_number, help=(
        "PostgreSQL: seconds the leader's lease lasts unless renewed.")),
    kube_extender: bool = typer.Option(False, "--kube-extender", rich_help_panel="Kubernetes", help=(
        "Serve the kube-scheduler extender (docs/kubernetes.md).")),
    kubeconfig: Optional[Path] = typer.Option(None, envvar="KUBECONFIG", rich_help_panel="Kubernetes", help=(
        "The API server's kubeconfig (default: ~/.kube/config, else in-cluster).")),
    kube_context: Optional[str] = typer.Option(None, rich_help_panel="Kubernetes", help="The kubeconfig context."),
    kube_sync: bool = typer.Option(True, "--kube-sync/--no-kube-sync", rich_help_panel="Kubernetes", help=(
        "List and watch nodes and pods.")),
    kube_tls_cert: Optional[Path] = typer.Option(None, rich_help_panel="Kubernetes", help=(
        "The verbs' server certificate (PEM; deploy/extender-certs.sh).")),
    kube_tls_key: Optional[Path] = typer.Option(None, rich_help_panel="Kubernetes", help="Its private key (PEM)."),
    kube_client_ca: Optional[Path] = typer.Option(None, rich_help_panel="Kubernetes", help=(
        "The CA that must sign kube-scheduler's client certificate.")),
    kube_tls_host: str = typer.Option("127.0.0.1", rich_help_panel="Kubernetes", help="The verbs' address."),
    kube_tls_port: int = typer.Option(8443, min=1, max=65535, rich_help_panel="Kubernetes", help="The verbs' port."),
    kube_plain_http: bool = typer.Option(False, "--kube-plain-http", rich_help_panel="Kubernetes", help=(
        "Verbs on --port without authentication (trusted tests only).")),
    kube_lease: Optional[str] = typer.Option(None, rich_help_panel="Kubernetes", help=(
        "NAMESPACE/NAME of kube-scheduler's Lease: bind only while ours holds it.")),
    kube_scheduler_identity: str = typer.Option("", show_default=False, rich_help_panel="Kubernetes", help=(
        "Our kube-scheduler's identity in the Lease (default: the host name).")),
    kube_scheduler_name: list[str] = typer.Option(["quasched"], rich_help_panel="Kubernetes", help=(
        "A schedulerName whose pods bind may bind (repeatable).")),
) -> None:
    """Run the scheduler service: HTTP API under /api/v1 (docs at /docs), dashboard at /, metrics at /metrics.

    The first start creates an admin token and writes it to quasched.token beside a SQLite database (mode 0600),
    where the client commands find it. Every option in detail: docs/service.md and docs/kubernetes.md."""
    from quasched.policies.registry import parse_specs
    from quasched.traces.errors import TraceError

    try:
        specs = parse_specs(policy)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--policy") from None
    if len(specs) != 1:
        raise typer.BadParameter("give one policy", param_hint="--policy")
    if clock == "virtual":
        if rng == "native":
            native_seed(seed, "--seed")
        return serve_virtual(trace, str(specs[0]), seed, rng, data_dir, cluster_file)
    cluster = None
    if cluster_file is not None:
        from quasched.traces.cluster_file import load_cluster_file

        try:
            cluster = load_cluster_file(cluster_file)
        except (TraceError, ValueError, OSError) as err:
            fail(str(err))
    from quasched.service.executor.runas import run_as as resolve_run_as

    try:
        accounts = resolve_run_as(run_as, run_as_file, run_as_self)
    except ValueError as err:
        fail(str(err))
    import uvicorn

    listener = listen(host, port)  # a port in use fails here, before anything is printed or stored
    from quasched.service.api.app import create_app, sqlite_file
    from quasched.service.executor.gpustate import Limits
    from quasched.service.loop.state import LoopOptions
    from quasched.service.store.database import shown_url, without_password

    kube = verbs_tls = verbs_listener = None
    extensions = []
    if kube_extender:
        from quasched.kube.client import KubernetesClient
        from quasched.kube.extender import KubeOptions

        try:
            client = KubernetesClient(str(kubeconfig) if kubeconfig else None, kube_context)
        except Exception as err:  # no kubeconfig, a bad file, no in-cluster credentials
            fail(f"--kube-extender: cannot load Kubernetes credentials: {err}")
        verbs_tls = kube_verbs_tls(kube_tls_cert, kube_tls_key, kube_client_ca, kube_tls_host, kube_tls_port,
                                   kube_plain_http)
        verbs_listener = listen(verbs_tls.host, verbs_tls.port) if verbs_tls else None
        if kube_lease is not None and (kube_lease.count("/") != 1 or not all(kube_lease.split("/"))):
            raise typer.BadParameter("NAMESPACE/NAME", param_hint="--kube-lease")
        # The loop neither preempts nor swaps here: it places no pod. The extender preempts for GPU pods, through
        # Kubernetes' Eviction API (quasched/kube/preemption.py)
        kube = KubeOptions(client=client, sync=kube_sync, scheduler_names=tuple(kube_scheduler_name),
                           lease=kube_lease, identity=kube_scheduler_identity or socket.gethostname(),
                           verbs_port=verbs_tls.port if verbs_tls else None, preemption=preemption)
        from quasched.kube.mount import extender

        extensions.append(extender(kube))
        if cluster is None and kube_sync:
            from quasched.service.loop.controller import nodes_of

            cluster = nodes_of([])
    if cluster is None and kube is None:
        cluster = this_machine(local_node)
    url = database_url(db)
    token_file = None if sqlite_file(url) is not None else TOKEN_FILE
    if not advertise_url:
        advertise_url = f"http://{socket.gethostname() if host in ('0.0.0.0', '::') else host}:{port}"

    def build() -> Any:
        """The app (while the server answers 503 "starting"; an error, e.g. a database that cannot be opened or
        migrated or a bad cluster, stops it) and the banner."""
        options = LoopOptions(policy=specs[0], order="fifo" if order == "fifo" else "fair",
                              decay_alpha=decay_alpha, grace_s=grace, preemption=preemption and kube is None,
                              defrag_per_hour=defrag_per_hour if kube is None else 0, batch_solver=batch_solver,
                              local_node=local_node if kube is None else None,
                              log_cap=int(log_cap), team_log_cap=int(team_log_cap))
        service_app = create_app(url, cluster, token_file=token_file, options=options, extensions=extensions,
                                 state_dir=state_dir, advertise_url=advertise_url, lease_ttl_s=lease_ttl,
                                 run_as=accounts, jobs_dir=jobs_dir, metrics_public=metrics_public,
                                 gpu_limits=Limits(gpu_hot, gpu_hot - 5))
        from quasched.service.runtime.auth import masked

        service = service_app.state.service
        base = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"
        console.print(f"quasched serve: {counted(len(service.records), 'node')}, policy {specs[0]}, "
                      f"database {shown_url(url)}")
        console.print(f"  API {base}/api/v1 (docs {base}/docs), metrics {base}/metrics")
        if not service.leading:
            console.print(f"  standby: reads only, writes are 503 until it takes over; the leader is "
                          f"{service.store.leader().describe()}")
        if service.executor is not None:
            console.print(f"  runs the commands of jobs placed on node {service.executor.node} (this machine); logs in "
                          f"{service.executor.dir}")
            console.print(f"  runs commands {accounts.describe()}; their directories in {service.executor.jobs_dir}")
        if kube is not None:
            verbs = f"https://{verbs_tls.host}:{verbs_tls.port}" if verbs_tls else base
            console.print(f"  kube-scheduler extender urlPrefix {verbs}/k8s/scheduler (filter, bind"
                          + (", mutual TLS" if verbs_tls else ", UNAUTHENTICATED: --kube-plain-http") + ")"
                          + ("; nodes and GPU pods synced from the API server" if kube.sync else ""))
            if kube.lease:
                console.print(f"  binds only while the Lease {kube.lease} is held by {kube.identity}_*")
        if service.new_admin_token:
            console.print(f"  admin token {masked(service.new_admin_token)} saved to {service.token_file} (mode 0600)")
            console.print(f"  dashboard {base}/#token=<the token in {service.token_file}>")
        else:
            console.print(f"  dashboard {base}/")
        return service_app

    from quasched.service.api.startup import Starting

    if verbs_tls is not None and verbs_listener is not None:
        from rich.markup import escape

        from quasched.kube.tls import run

        def stop_both() -> None:  # the verbs' server beside: a signal stops both
            console.print(f"[bold red]error:[/] cannot start the service on {shown_url(url)}: "
                          f"{escape(without_password(str(front.failure), url))}")
            signal.raise_signal(signal.SIGTERM)

        front = Starting(build, on_failure=stop_both)
        run(front, listener, verbs_listener, verbs_tls)
        return
    from quasched.kube.nodelay import NoDelayHttpToolsProtocol  # TCP_NODELAY: no 40 ms Nagle stall per call

    front = Starting(build, on_failure=lambda: setattr(server, "should_exit", True))
    server = uvicorn.Server(uvicorn.Config(front, log_level="warning", timeout_graceful_shutdown=2, access_log=False,
                                           http=NoDelayHttpToolsProtocol))
    server.run(sockets=[listener])
    if front.failure is not None:
        fail(f"cannot start the service on {shown_url(url)}: {without_password(front.failure, url)}")


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host:port``; a clean error when the address is in use or not this machine's."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as err:
        fail(f"cannot listen on {host}:{port}: {err.strerror or err} (another `quasched serve`? see --port)")
    return sock
