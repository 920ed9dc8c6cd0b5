"""What exactly-once costs, as ratios measured in one run (issue Transactions' speed targets).

    .venv/bin/python -m load.bench_transactions [--messages 300000] [--rounds 3]
        [--txn-records 1000] [--abort-every 10]

Starts 1 master and 1 broker as real processes on 127.0.0.1 (``tests/cluster.py``) and runs
``tubeq bench produce|consume`` with 1 KiB values on async topics of 6 partitions, one client
process at a time, the cases interleaved round by round (this machine is small and noisy:
absolute rates swing between runs, ratios of neighbours much less). Prints one JSON object:
each round's rates and ratios, the medians, and the ratios of the medians against their
targets:

- ``idempotent_vs_plain``: produce with idempotence on (the default) against off: >= 0.95.
- ``transactional_vs_idempotent``: transactions of ``--txn-records`` records, record i to
  partition i % 6 (so every transaction touches all 6), committed records per second with
  every commit inside the time, against the same records sent idempotently without a
  transaction: >= 0.8.
- ``read_committed_vs_uncommitted``: one topic written in transactions of ``--txn-records``
  records with every ``--abort-every``-th aborted (before the rounds), read from the
  beginning by a PullConsumer with isolation_level ``read_committed`` against
  ``read_uncommitted``, records delivered per second: >= 0.9.

The transactional runs also report where a transaction's time goes (``transactions``): the
wait for its last records' acknowledgements (drain) and the coordinator's EndTxn (end), as
percentiles and as shares of the run.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from load import stop_on_sigterm
from load.bench_cluster import tubeq_bench

TARGETS = {"idempotent_vs_plain": 0.95, "transactional_vs_idempotent": 0.8,
           "read_committed_vs_uncommitted": 0.9}
PAIRS = {"idempotent_vs_plain": ("idempotent", "plain"),
         "transactional_vs_idempotent": ("transactional", "idempotent_round_robin"),
         "read_committed_vs_uncommitted": ("read_committed", "read_uncommitted")}


def produce(masters: str, topic: str, messages: int, *flags: str) -> dict:
    got = tubeq_bench(masters, "produce", "--topic", topic, "--size", "1024", "--messages",
                      str(messages), *flags)["produce"]
    if got["failures"]:
        raise RuntimeError(f"produce to {topic}: {got['failures']} failures")
    return got


def consume(masters: str, topic: str, expected: int, isolation: str) -> float:
    got = tubeq_bench(masters, "consume", "--topic", topic, "--messages", str(expected),
                      "--isolation", isolation)["consume"]
    if got["messages"] != expected:  # fewer would also time the consumer's idle wait
        raise RuntimeError(f"consume {topic} {isolation}: {got['messages']} of {expected}")
    return got["msgs_per_s"]


def txn_flags(txn_id: str, per_txn: int, abort_every: int = 0) -> tuple[str, ...]:
    return ("--round-robin", "--transactional-id", txn_id, "--txn-records", str(per_txn),
            "--abort-every", str(abort_every))


def aborted_topic(masters: str, messages: int, per_txn: int, abort_every: int) -> dict:
    """The topic the isolation levels read, written once: how many records each sees."""
    got = produce(masters, "txn-aborted", messages, *txn_flags("bench-aborts", per_txn,
                                                              abort_every))
    if not got["aborted"]:
        raise RuntimeError("the read_committed topic has no aborted transaction: raise "
                           "--messages or lower --abort-every")
    warm_up = 1  # the committed one-record transaction before the timed ones
    return {"topic": "txn-aborted", "read_committed": got["committed"] + warm_up,
            "read_uncommitted": got["messages"] + warm_up, "aborted": got["aborted"],
            "transactions": got["transactions"], "committed_msgs_per_s": got["msgs_per_s"]}


def one_round(masters: str, n: int, messages: int, per_txn: int, read: dict,
              txn_runs: list[dict]) -> dict[str, float]:
    def transactional() -> float:
        got = produce(masters, f"txn-transactional-{n}", messages,
                      *txn_flags(f"bench-txn-{n}", per_txn))
        txn_runs.append(got)
        return got["msgs_per_s"]

    cases: list[tuple[str, Callable[[], float]]] = [
        ("idempotent", lambda: produce(masters, f"txn-idempotent-{n}", messages,
                                       "--idempotent")["msgs_per_s"]),
        ("plain", lambda: produce(masters, f"txn-plain-{n}", messages,
                                  "--no-idempotent")["msgs_per_s"]),
        ("transactional", transactional),
        ("idempotent_round_robin", lambda: produce(masters, f"txn-rr-{n}", messages,
                                                   "--idempotent", "--round-robin")["msgs_per_s"]),
        ("read_committed", lambda: consume(masters, read["topic"], read["read_committed"],
                                           "read_committed")),
        ("read_uncommitted", lambda: consume(masters, read["topic"], read["read_uncommitted"],
                                             "read_uncommitted")),
    ]
    if n % 2:
        cases.reverse()  # neither case of a pair always runs first
    return {name: case() for name, case in cases}


WRITES_PER_TXN = 3  # AddPartitionsToTxn, PREPARE_*, COMPLETE_*: each one Raft round


def master_write_ms(masters: str, samples: int = 30) -> float:
    """The median time of one replicated metadata write, measured now: InitProducerId of a
    transactional_id bumps its epoch, one Raft round each."""
    from lib.producer.transaction import Transactions
    from lib.rpc import MasterClient, client_pool

    pool = client_pool(masters, None, 10, None)  # the admin, from the environment
    client = MasterClient(masters, pool=pool, timeout=10)
    try:
        txn = Transactions(client, "bench-write-probe", 0, "bench", 10)
        txn.init()
        took = []
        for _ in range(samples):
            start = time.perf_counter()
            txn.init()
            took.append((time.perf_counter() - start) * 1000)
        return round(statistics.median(took), 2)
    finally:
        client.close()
        pool.close()


def ceiling(per_txn: int, idempotent_per_s: float, write_ms: float) -> dict:
    """What ``transactional_vs_idempotent`` can reach on this machine at best: a transaction's
    records take as long as sent idempotently, plus its coordinator's Raft rounds at the
    write time measured in the same run (markers and the pre-commit fsync not even
    counted)."""
    records_ms = per_txn / idempotent_per_s * 1000
    return {"master_write_ms": write_ms, "writes_per_transaction": WRITES_PER_TXN,
            "records_ms_per_transaction": round(records_ms, 2),
            "transactional_vs_idempotent": round(
                records_ms / (records_ms + WRITES_PER_TXN * write_ms), 3)}


def where_time_goes(runs: list[dict]) -> dict:
    """The transactional runs' own account: per transaction, the median and p99 of the wait
    for its records' acknowledgements after its last send (drain) and of EndTxn (end)."""
    def med(key: str, field: str) -> float:
        return round(statistics.median(r[key][field] for r in runs), 3)
    return {"drain_p50_ms": med("drain_latency", "p50_ms"),
            "drain_p99_ms": med("drain_latency", "p99_ms"),
            "end_p50_ms": med("end_latency", "p50_ms"),
            "end_p99_ms": med("end_latency", "p99_ms"),
            "drain_share": round(statistics.median(r["drain_share"] for r in runs), 3),
            "end_share": round(statistics.median(r["end_share"] for r in runs), 3),
            "transactions_per_run": runs[0]["transactions"]}


def run(messages: int, rounds: int, per_txn: int, abort_every: int) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.cluster import Cluster  # the same process handling the tests use

    root = Path(tempfile.mkdtemp(prefix="tubeq-bench-txn-"))
    cluster = Cluster(root / "c")
    per_round: list[dict[str, float]] = []
    txn_runs: list[dict] = []
    try:
        cluster.start(brokers=1)
        cluster.use_admin_env()  # auth is on: clients log in as the admin
        masters = cluster.master_addresses
        read = aborted_topic(masters, messages, per_txn, abort_every)
        for n in range(rounds):
            per_round.append(one_round(masters, n, messages, per_txn, read, txn_runs))
        write_ms = master_write_ms(masters)
    finally:
        cluster.stop_all()
        shutil.rmtree(root, ignore_errors=True)
    medians = {k: statistics.median(r[k] for r in per_round) for k in per_round[0]}
    ratios = {k: round(medians[a] / medians[b], 3) for k, (a, b) in PAIRS.items()}
    return {
        "setup": f"1 master, 1 broker, async topics of 6 partitions, 1 KiB values, {messages} "
                 f"per case, transactions of {per_txn} records, {rounds} rounds interleaved, "
                 f"{os.cpu_count()} CPUs",
        "rounds_msgs_per_s": per_round,
        "rounds_ratios": [{k: round(r[a] / r[b], 3) for k, (a, b) in PAIRS.items()}
                          for r in per_round],
        "medians_msgs_per_s": medians,
        "ratios": ratios,
        "targets": TARGETS,
        "met": {k: ratios[k] >= t for k, t in TARGETS.items()},
        "transactions": where_time_goes(txn_runs),
        "ceiling": {**(top := ceiling(per_txn, medians["idempotent_round_robin"], write_ms)),
                    "measured_of_ceiling": round(ratios["transactional_vs_idempotent"]
                                                 / top["transactional_vs_idempotent"], 3)},
        "read_committed_topic": read,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m load.bench_transactions", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=300_000, help="records per case and round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--txn-records", type=int, default=1000, help="records per transaction")
    p.add_argument("--abort-every", type=int, default=10,
                   help="the read_committed topic aborts every Nth transaction")
    args = p.parse_args(argv)
    stop_on_sigterm()
    if args.messages < 1 or args.rounds < 1:
        p.error("--messages and --rounds must be >= 1")
    if args.txn_records < 1 or args.abort_every < 1:
        p.error("--txn-records and --abort-every must be >= 1")
    print(json.dumps(run(args.messages, args.rounds, args.txn_records, args.abort_every),
                     indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
