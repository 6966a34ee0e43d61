"""200 consumers in 20 groups on one broker: rebalances stay correct, idle traffic stays cheap.

    python3 bench/many_groups.py [--groups 20] [--members 10] [--procs 4] [--steady 30]

One broker (``twistd -n pluglog --http``, fresh data dir) and one topic of
12 partitions per group. ``--procs`` worker processes hold the members
(confluent-kafka consumers, ``subscribe()``, range assignor, librdkafka's
default 45 s session and 3 s heartbeat), member j of group i in process
(i x members + j) mod procs, so every group has members in every process.

Phases, each judged from the broker's own DescribeGroups answers (members
and their decoded assignments: every partition of the group's topic owned
by exactly one member, the group Stable):

1. start: all members join; time until all 20 groups are correct;
2. steady: ``--steady`` seconds with no records, so the traffic is
   heartbeats and empty long-polling fetches; broker CPU from /proc as a
   share of one core, and requests per second by API from ``/metrics``;
3. a worker process is SIGKILLed (a quarter of every group's members
   vanish without LeaveGroup): time until every group is correct again
   with the members left (the session timeout, then the rebalance);
4. the worker is started again: time until all groups are whole.
"""

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from pluglog import protocol as codec  # noqa: E402
from pluglog.cli.groups import _assignment  # noqa: E402
from pluglog.client.blocking import BlockingClient  # noqa: E402
from tests.broker_process import BrokerProcess, free_port  # noqa: E402

PARTITIONS = 12


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def worker(args):
    """One process's members: poll them all, round robin, until killed."""
    import confluent_kafka

    mine = [
        (g, m)
        for g in range(args.groups)
        for m in range(args.members)
        if (g * args.members + m) % args.procs == args.worker
    ]
    consumers = []
    for g, m in mine:
        consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": args.bootstrap,
                "group.id": f"grp{g}",
                "client.id": f"m{g}-{m}",
                "partition.assignment.strategy": "range",
                "enable.auto.commit": False,
            }
        )
        consumer.subscribe([f"topic{g}"])
        consumers.append(consumer)
    while True:
        for consumer in consumers:
            consumer.poll(0)
        time.sleep(0.05)


def start_worker(args, number):
    argv = [sys.executable, os.path.abspath(__file__), "--worker", str(number)]
    argv += ["--bootstrap", args.bootstrap, "--groups", str(args.groups)]
    argv += ["--members", str(args.members), "--procs", str(args.procs)]
    return subprocess.Popen(argv, stderr=subprocess.DEVNULL)


def groups_correct(client, groups, members_by_group):
    """True when every group is Stable with ``members_by_group[g]`` members
    whose assignments cover its topic's partitions exactly once."""
    names = [f"grp{g}" for g in range(groups)]
    described = client.request(codec.DESCRIBE_GROUPS, 3, {"groups": names})["groups"]
    for g, group in enumerate(described):
        if group["group_state"] != "Stable" or len(group["members"]) != members_by_group[g]:
            return False
        owned = []
        for member in group["members"]:
            owned.extend(_assignment(member["member_assignment"]))
        if sorted(owned) != [(f"topic{g}", p) for p in range(PARTITIONS)]:
            return False
    return True


def wait_correct(client, groups, members_by_group, timeout=300):
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if groups_correct(client, groups, members_by_group):
            return time.monotonic() - started
        time.sleep(0.5)
    raise SystemExit(f"groups not correct after {timeout} s")


def requests_by_api(http_port):
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=30) as reply:
        text = reply.read().decode()
    return {
        found.group(1): float(found.group(2))
        for found in re.finditer(r'^pluglog_requests_total\{api="(\w+)"\} (\S+)$', text, re.M)
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--groups", type=int, default=20)
    parser.add_argument("--members", type=int, default=10)
    parser.add_argument("--procs", type=int, default=4)
    parser.add_argument("--steady", type=float, default=30.0)
    parser.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        return worker(args)

    work = tempfile.mkdtemp(prefix="many-groups-")
    http_port = free_port()
    process = BrokerProcess(
        os.path.join(work, "data"), extra_args=["--http", f"tcp:{http_port}:interface=127.0.0.1"]
    ).start(timeout=60)
    broker, port = process.proc, process.port
    args.bootstrap = f"127.0.0.1:{port}"
    workers = {}
    try:
        client = None
        deadline = time.monotonic() + 60
        while client is None:
            try:
                client = BlockingClient("127.0.0.1", port, timeout=30)
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
        for g in range(args.groups):
            client.request(
                codec.CREATE_TOPICS,
                4,
                {
                    "topics": [
                        {
                            "name": f"topic{g}",
                            "num_partitions": PARTITIONS,
                            "replication_factor": 1,
                            "assignments": [],
                            "configs": [],
                        }
                    ],
                    "timeout_ms": 10000,
                    "validate_only": False,
                },
            )
        full = [args.members] * args.groups
        started = time.monotonic()
        for number in range(args.procs):
            workers[number] = start_worker(args, number)
        joined = wait_correct(client, args.groups, full, timeout=600)
        print(
            f"start: {args.groups * args.members} members in {args.groups} groups "
            f"correct after {time.monotonic() - started:.1f} s (waited {joined:.1f} s)",
            flush=True,
        )

        before = requests_by_api(http_port)
        cpu = cpu_seconds(broker.pid)
        time.sleep(args.steady)
        cpu = cpu_seconds(broker.pid) - cpu
        after = requests_by_api(http_port)
        rates = {
            api: (after[api] - before.get(api, 0)) / args.steady
            for api in after
            if after[api] != before.get(api, 0)
        }
        print(
            f"steady {args.steady:.0f} s: broker CPU {100 * cpu / args.steady:.1f} % of one "
            f"core; requests/s "
            + ", ".join(f"{api} {rate:.0f}" for api, rate in sorted(rates.items())),
            flush=True,
        )
        # Still correct after the steady phase: nobody was dropped.
        assert groups_correct(client, args.groups, full), "a group changed while idle"

        victim = args.procs - 1
        workers[victim].send_signal(signal.SIGKILL)
        workers[victim].wait()
        left = [
            sum(1 for m in range(args.members) if (g * args.members + m) % args.procs != victim)
            for g in range(args.groups)
        ]
        took = wait_correct(client, args.groups, left, timeout=600)
        print(
            f"worker {victim} SIGKILLed ({sum(full) - sum(left)} members gone): every group "
            f"correct again after {took:.1f} s",
            flush=True,
        )
        workers[victim] = start_worker(args, victim)
        took = wait_correct(client, args.groups, full, timeout=600)
        print(f"worker {victim} back: every group whole again after {took:.1f} s", flush=True)
    finally:
        for proc in workers.values():
            proc.kill()
        process.stop(60)


if __name__ == "__main__":
    main()
