"""Exit 1 with the reason unless every URL answers within 10 s: setup.sh runs this
before pip, whose own retries take minutes to fail. Shipped by `course export gradescope`
(course_utils/grading/probe_indexes.py)."""

import sys
import threading
import urllib.request

TIMEOUT_S = 10


def reach(url, outcome):
    try:
        urllib.request.urlopen(url, timeout=TIMEOUT_S).close()
        outcome.append("")
    except Exception as exc:  # refused, no DNS, HTTP 404, a malformed URL: each stops the build
        outcome.append(f"{type(exc).__name__}: {exc}")


def main(urls):
    for url in urls:
        outcome = []
        worker = threading.Thread(target=reach, args=(url, outcome), daemon=True)
        worker.start()
        worker.join(TIMEOUT_S)
        why = outcome[0] if outcome else "no answer"
        if why:
            print(
                f"setup.sh: cannot reach {url} within {TIMEOUT_S} s ({why}); stopping before pip. "
                "The build needs this index: set COURSE_TORCH_INDEX (torch's) or PIP_INDEX_URL "
                "(PyPI's) to one it can reach, or re-export with --torch-index.",
                file=sys.stderr,
            )
            return 1
        print(f"setup.sh: {url} answers")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
