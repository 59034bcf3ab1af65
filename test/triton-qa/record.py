"""Runs the Python interpreter it was started with on its arguments and
passes stdout and stderr through, keeping a copy of both in a file under
$QA_RECORDS, so that count.py can read every unittest summary a test.sh
produced even where the script overwrites or deletes its own logs."""

import os
import subprocess
import sys
import threading
import time


def main():
    records = os.environ["QA_RECORDS"]
    os.makedirs(records, exist_ok=True)
    name = os.path.join(records, "%d.%d" % (time.time_ns(), os.getpid()))
    with open(name, "wb") as rec:
        rec.write(("# cwd %s\n# argv %s\n" % (os.getcwd(), sys.argv[1:])).encode())
        lock = threading.Lock()
        proc = subprocess.Popen(
            [sys.executable] + sys.argv[1:],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

        def copy(src, dst):
            for line in iter(src.readline, b""):
                dst.write(line)
                dst.flush()
                with lock:
                    rec.write(line)

        threads = [
            threading.Thread(target=copy, args=(proc.stdout, sys.stdout.buffer)),
            threading.Thread(target=copy, args=(proc.stderr, sys.stderr.buffer)),
        ]
        for t in threads:
            t.start()
        try:
            code = proc.wait()
        except KeyboardInterrupt:
            proc.terminate()
            code = proc.wait()
        for t in threads:
            t.join()
    sys.exit(code)


if __name__ == "__main__":
    main()
