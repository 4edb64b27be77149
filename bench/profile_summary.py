"""A py-spy raw profile (one line per stack: frames joined by ';', then its count) as two
tables: where the samples were (the leaf frame), and which frames they were inside (inclusive).

    python3 bench/profile_summary.py host_profile.txt [--rate 100 --seconds 9]

With --rate and --seconds (of a --gil profile), the samples over rate x seconds: the share of
the time some thread held the GIL. With --by-thread (a --threads profile, waits included), each
thread's (by name) own leaves: where each kind of thread spends or waits out its time.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("profile", type=Path)
    parser.add_argument("--rate", type=int)
    parser.add_argument("--seconds", type=float)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--by-thread", action="store_true")
    args = parser.parse_args()
    leaf: collections.Counter[str] = collections.Counter()
    inner: collections.Counter[str] = collections.Counter()
    threads: collections.defaultdict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for line in args.profile.read_text().splitlines():
        stack, _, count = line.rstrip().rpartition(" ")
        frames = stack.split(";")
        leaf[frames[-1]] += int(count)
        threads[frames[0].partition(": ")[2] or frames[0]][frames[-1]] += int(count)
        for frame in set(frames):
            inner[frame] += int(count)
    total = sum(leaf.values()) or 1
    print("samples:", total)
    if args.rate and args.seconds:
        print(f"GIL held: {total / (args.rate * args.seconds):.1%} of the time")
    print("-- where they were (leaf) --")
    for frame, n in leaf.most_common(args.top):
        print(f"{n / total:6.1%} {frame[:150]}")
    print("-- inside (inclusive) --")
    for frame, n in inner.most_common(args.top + 15):
        print(f"{n / total:6.1%} {frame[:150]}")
    if args.by_thread:
        for name, leaves in sorted(threads.items(), key=lambda item: -sum(item[1].values())):
            own = sum(leaves.values())
            print(f"-- thread {name}: {own / total:.1%} of the samples --")
            for frame, n in leaves.most_common(6):
                print(f"  {n / own:6.1%} {frame[:140]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
