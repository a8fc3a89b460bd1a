"""SWE-ReX's own ``DockerDeployment`` as the baseline of the docker start benchmark.

Run by ``benches/docker_start.rs`` with the SWE-ReX venv's python (``.venv-swerex``), on the
image that ``scripts/bench/swerex-docker-image.sh`` builds (the sandbox image plus SWE-ReX's
site-packages and a ``swerex-remote`` command)::

    .venv-swerex/bin/python crates/uniagent-sandboxes/benches/swerex_docker_baseline.py \
        --image "$(scripts/bench/swerex-docker-image.sh)"

Measures what the Rust bench measures for its own backend: ``start()`` to the first successful
command (``echo ready``, checked), 20 times one after another (median, p90), then 32 concurrent
starts (wall time, per-sandbox median). Every deployment is stopped, also on failure. The
concurrent starts run one thread and event loop each, as SWE-agent's batch mode does: SWE-ReX's
start-up wait sleeps with ``time.sleep``, so 32 starts on one event loop would serialise.

SWE-ReX as shipped polls ``is_alive`` every 0.25 s (plus a 0.15 s request timeout), which
quantises its start times. To separate that from the server's own start-up, the sequential
starts are measured a second time with the wait loop replaced by one that polls every 10 ms
(``tight_poll_*`` figures; the same deployment otherwise).

Prints one JSON line on stdout; diagnostics go to stderr; the exit status is non-zero on failure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import threading
import time

# SWE-ReX logs every start at DEBUG level through rich; keep stderr for warnings.
os.environ.setdefault("SWE_REX_LOG_STREAM_LEVEL", "WARNING")

import swerex.deployment.docker as swerex_docker  # noqa: E402
from swerex.deployment.docker import DockerDeployment  # noqa: E402
from swerex.runtime.abstract import Command  # noqa: E402


def new_deployment(args: argparse.Namespace) -> DockerDeployment:
    return DockerDeployment(
        image=args.image,
        pull="never",
        startup_timeout=args.startup_timeout,
        docker_args=[f"--memory={args.memory}"],
    )


async def start_to_first_exec(deployment: DockerDeployment) -> float:
    t0 = time.perf_counter()
    await deployment.start()
    out = await deployment.runtime.execute(Command(command="echo ready", shell=True, timeout=30))
    elapsed = time.perf_counter() - t0
    if out.exit_code != 0 or out.stdout != "ready\n":
        raise RuntimeError(f"unexpected first command result: {out!r}")
    return elapsed


async def one_sandbox(args: argparse.Namespace) -> float:
    deployment = new_deployment(args)
    try:
        return await start_to_first_exec(deployment)
    finally:
        await deployment.stop()


async def wait_until_alive_tight(function, timeout: float = 10.0, function_timeout: float | None = 0.1, sleep: float = 0.25):
    """SWE-ReX's ``_wait_until_alive`` with a 10 ms, non-blocking pause between attempts."""
    del sleep
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if await function(timeout=function_timeout):
            return
        await asyncio.sleep(0.01)
    raise TimeoutError(f"Runtime did not start within {timeout}s")


def ms(seconds: float) -> float:
    return round(seconds * 1e3, 1)


def median_p90(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    # The same order statistics as the Rust bench: element n/2 and element min(n*9/10, n-1).
    return ordered[len(ordered) // 2], ordered[min(len(ordered) * 9 // 10, len(ordered) - 1)]


def concurrent(args: argparse.Namespace) -> tuple[float, list[float]]:
    results: list[float | BaseException | None] = [None] * args.concurrent
    barrier = threading.Barrier(args.concurrent + 1)

    def worker(i: int) -> None:
        barrier.wait()
        try:
            results[i] = asyncio.run(one_sandbox(args))
        except BaseException as e:  # reported below, after every thread has stopped its sandbox
            results[i] = e

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(args.concurrent)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    errors = [r for r in results if not isinstance(r, float)]
    if errors:
        raise RuntimeError(f"{len(errors)} of {args.concurrent} concurrent starts failed: {errors[0]!r}")
    return wall, [r for r in results if isinstance(r, float)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", required=True)
    parser.add_argument("--sequential", type=int, default=20)
    parser.add_argument("--concurrent", type=int, default=32)
    parser.add_argument("--memory", default="256m")
    parser.add_argument("--startup-timeout", type=float, default=120.0)
    args = parser.parse_args()

    import swerex

    warm_up = asyncio.run(one_sandbox(args))
    sequential = [asyncio.run(one_sandbox(args)) for _ in range(args.sequential)]
    seq_median, seq_p90 = median_p90(sequential)
    shipped_wait = swerex_docker._wait_until_alive
    swerex_docker._wait_until_alive = wait_until_alive_tight
    try:
        tight = [asyncio.run(one_sandbox(args)) for _ in range(args.sequential)]
    finally:
        swerex_docker._wait_until_alive = shipped_wait
    tight_median, tight_p90 = median_p90(tight)
    wall, per_sandbox = concurrent(args)
    print(
        json.dumps(
            {
                "swerex_version": getattr(swerex, "__version__", "unknown"),
                "image": args.image,
                "warm_up_ms": ms(warm_up),
                "sequential": args.sequential,
                "sequential_median_ms": ms(seq_median),
                "sequential_p90_ms": ms(seq_p90),
                "tight_poll_median_ms": ms(tight_median),
                "tight_poll_p90_ms": ms(tight_p90),
                "concurrent": args.concurrent,
                "concurrent_wall_ms": ms(wall),
                "concurrent_median_ms": ms(median_p90(per_sandbox)[0]),
                "concurrent_mean_ms": ms(statistics.fmean(per_sandbox)),
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
