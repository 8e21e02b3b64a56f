#!/usr/bin/env python3
"""Fails when code in src/sinks/ or src/runs/ reads a stored row's cell by its position (row[6], r.at(1)).

A row is read by the name of its column: a stored table's through the schema (core/schema.hpp: column_index), a
query's own columns through the list that also writes its SELECT (sinks/runs_query.hpp: ResultColumn), and the one
cell of a one-column query (a count, a list of ids) through only_cell. A number in brackets silently reads another
column once a SELECT list or the schema changes.

A row is a name declared in the file with a row's type (std::span<const Value>, std::vector<Value>, MYSQL_ROW,
const Value*), or one of the names rows go by here (row, r, cells). Run by ctest and usable by hand:
scripts/check_row_reads.py [SRC_DIR]."""
import pathlib
import re
import sys

FOLDERS = ("sinks", "runs")
ROW_TYPES = (r"std::span<const Value>", r"span<const Value>", r"std::vector<Value>", r"MYSQL_ROW", r"const Value\s*\*")
ROW_NAMES = {"row", "r", "cells"}
DECLARED = re.compile(r"(?:%s)\s*&{0,2}\s*([A-Za-z_]\w*)" % "|".join(ROW_TYPES))
COMMENT = re.compile(r"//.*$")


def positional(name: str) -> re.Pattern:
    n = re.escape(name)
    return re.compile(r"(?<![\w.>])%s\s*(?:\[\s*\d+\s*\]|\.at\(\s*\d+\s*\))" % n)


def main() -> int:
    src = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent / "src")
    bad = []
    for folder in FOLDERS:
        for path in sorted((src / folder).rglob("*")):
            if path.suffix not in (".hpp", ".cpp", ".h") or not path.is_file():
                continue
            lines = [COMMENT.sub("", line) for line in path.read_text(errors="replace").splitlines()]
            names = set(ROW_NAMES)
            for line in lines:
                names.update(DECLARED.findall(line))
            patterns = [positional(n) for n in sorted(names)]
            for no, line in enumerate(lines, 1):
                if any(p.search(line) for p in patterns):
                    bad.append(f"{path.relative_to(src).as_posix()}:{no}: {line.strip()}")
    for b in bad:
        print(f"check_row_reads: {b}: a stored row's cell read by its position; read it by its column's name "
              f"(column_index, a ResultColumn list, only_cell)", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
