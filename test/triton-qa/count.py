"""Reads the records record.py kept for one L0 directory and prints
"CASES FAILED" (unittest's "Ran N tests" and its failures plus errors,
or pytest's summary line),
writing the names of the failed cases, with the records they are in, to
the file named by the second argument."""

import os
import re
import sys

RAN = re.compile(r"^Ran (\d+) tests? in ")
FAILED = re.compile(r"^FAILED \((.*)\)")
NAMED = re.compile(r"^(FAIL|ERROR): (\S+) \((\S+)\)")
# pytest's last line, e.g. "==== 2 failed, 5 passed, 1 skipped in 3.10s ====",
# and its short summary lines, "FAILED file.py::Class::test - reason".
PYTEST_SUMMARY = re.compile(r"^=+ (.*\d+ (?:passed|failed|error|errors|skipped)\b.*) in [\d.]+s")
PYTEST_NAMED = re.compile(r"^(FAILED|ERROR) (\S+::\S+)")


def main():
    records, out = sys.argv[1], sys.argv[2]
    ran = bad = skipped = 0
    lines_out = []
    for name in sorted(os.listdir(records)):
        path = os.path.join(records, name)
        with open(path, "rb") as f:
            text = f.read().decode("utf-8", "replace")
        argv = ""
        names = []
        for line in text.splitlines():
            if line.startswith("# argv "):
                argv = line[len("# argv "):]
            m = NAMED.match(line)
            if m:
                where = m.group(3)
                if not where.endswith("." + m.group(2)):
                    where += "." + m.group(2)
                names.append("%s %s" % (m.group(1), where))
            m = PYTEST_NAMED.match(line)
            if m:
                names.append("%s %s" % (m.group(1), m.group(2)))
            m = PYTEST_SUMMARY.match(line)
            if m:
                for part in m.group(1).split(","):
                    n, _, kind = part.strip().partition(" ")
                    if not n.isdigit():
                        continue
                    if kind in ("passed", "failed", "error", "errors", "skipped"):
                        ran += int(n)
                    if kind in ("failed", "error", "errors"):
                        bad += int(n)
                    if kind == "skipped":
                        skipped += int(n)
            m = RAN.match(line)
            if m:
                ran += int(m.group(1))
            m = FAILED.match(line)
            if m:
                for part in m.group(1).split(","):
                    k, _, v = part.strip().partition("=")
                    if k in ("failures", "errors"):
                        bad += int(v)
                    if k == "skipped":
                        skipped += int(v)
            m = re.match(r"^OK \(skipped=(\d+)\)", line)
            if m:
                skipped += int(m.group(1))
        for n in names:
            lines_out.append("%s    [%s %s]" % (n, name, argv))
    with open(out, "w") as f:
        f.write("cases %d failed %d skipped %d\n" % (ran, bad, skipped))
        f.write("\n".join(lines_out) + ("\n" if lines_out else ""))
    print(ran, bad)


if __name__ == "__main__":
    main()
