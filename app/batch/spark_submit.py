"""``spark-submit app/batch/spark_submit.py INPUT... --out DIR [options]``: ``neardup
dedup`` with the Spark engine and the master spark-submit was given (docs/dedup.md)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from app.batch import command


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="spark-submit app/batch/spark_submit.py")
    commands = parser.add_subparsers(dest="command")
    command.add_parser(commands)
    arguments = parser.parse_args(["dedup", *(sys.argv[1:] if argv is None else argv)])
    arguments.engine = "spark"
    arguments.master = None
    command.dedup(arguments)


if __name__ == "__main__":
    main()
