"""Classes from the command line, for a teacher preparing a lecture or an operator.

    python -m explorer.classes new [--url http://server:8501] [--hours 4]   the join link, then the teacher link
    python -m explorer.classes purge                                        delete the classes past their time

The store is the page's (ATTENTION_EXPLORER_CLASS_STORE, default a SQLite file in the server's data folder), so
run it where the server runs, or with the same setting.
"""

from __future__ import annotations

import argparse
import sys

from explorer.classes.database import StoreUnavailable
from explorer.classes.store import MAX_HOURS, open_store, retention_hours


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m explorer.classes", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    new = commands.add_parser("new", help="make a class: print its join link, then its teacher link")
    new.add_argument("--url", default="", help="the page's address as students reach it (default: links from /)")
    new.add_argument("--hours", type=float, default=None, help="how long it is kept (default: the store's setting)")
    commands.add_parser("purge", help="delete every class past its time, with its answers")
    args = parser.parse_args(argv)
    try:
        hours = retention_hours() if getattr(args, "hours", None) is None else args.hours
        if not 0 < hours <= MAX_HOURS:
            parser.error(f"--hours must be more than 0 and at most {MAX_HOURS:g}")
        store = open_store()
        if args.command == "purge":
            print(f"{store.purge_expired()} classes deleted")
            return 0
        made = store.create_class(hours)
    except (StoreUnavailable, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    base = args.url.rstrip("/") + "/"
    print(f"{base}?class={made.code}")
    print(f"{base}?class={made.code}&teacher={made.teacher_key}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
