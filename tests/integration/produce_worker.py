"""Child process for volume tests: ``python -m tests.integration.produce_worker M TOPIC ID N``.

Sends N records ``b"<id>:<seq>"`` keyed ``k<seq % 97>`` and exits 0 once every one is acked
(prints the count of failures otherwise, exit 1).
"""
from __future__ import annotations

import sys

from lib import Producer


def main() -> int:
    masters, topic, ident, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    failures = 0
    with Producer(masters, linger_ms=5) as producer:
        futures = [producer.send(topic, b"%s:%d" % (ident.encode(), seq),
                                 key=b"k%d" % (seq % 97)) for seq in range(count)]
        producer.flush()
        for fut in futures:
            if fut.exception() is not None:
                failures += 1
    if failures:
        print(f"{failures} sends failed", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
