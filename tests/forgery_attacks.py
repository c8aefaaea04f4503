"""Red-team data: a learner's attempts to earn the toy lesson's points without solving it.

Every `Attack` edits the toy lesson of tests/grading_fixtures.py (its cells: title, parameters,
the checks, `def double`, the locked toy-double check, `def square`, the locked toy-square
check, a plot). `double_cell` replaces the exercise cell `def double(x): ...` and always
defines `double` wrongly (or so that it never answers); `extra_cells` are `(where, source)`
pairs, `where` being

- "after-checks": inserted right after the cell that defines the checks,
- "before-double-check": inserted just before the locked toy-double check cell,
- "end": appended after the last cell.

The target is always toy-double (1 point). For every entry of `ATTACKS` a correct defence
gives toy-double 0 points; for every entry of `VALID` (honest, correct answers that happen to
be noisy) it gives toy-double its 1 point.

`BEYOND_IN_PROCESS_DEFENCE` names the attacks that do not forge a cell or an output at all:
they bend the check's own inputs or code, which live in the learner's kernel, so the real
harness itself reports a pass. The README says as much ("the grader defeats edited, deleted
and forged check cells and outputs, not a rewritten harness"). A test can hold them to 0
points only where the harness happens to defend itself, and should treat them apart.

Everything here is plain source text: nothing in this module runs an attack. The attacks use
only the standard library, IPython and the public names `course_utils.checks.check` and
`course_utils.checks.correct`. None sleeps for long except the two hangs; the background
writers live at most about 2 s.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

WHERE = ("after-checks", "before-double-check", "end")
MIME = "application/vnd.course-check+json"


@dataclass(frozen=True)
class Attack:
    id: str
    idea: str
    double_cell: str
    extra_cells: tuple[tuple[str, str], ...] = ()


# --- shared snippets -------------------------------------------------------------------------

FORGED = {
    "check_id": "toy-double",
    "status": "passed",
    "points": 1.0,
    "max_points": 1.0,
    "device_class": "cpu",
    "message": "double(3) returned 6, expected 6",
    "hint": "",
    "value": None,
    "threshold": None,
    "parts": [],
}

# Defines _MIME, _FORGED and _forge(), which displays a passed toy-double payload the way the
# harness displays its own.
FORGE = f"""\
from IPython.display import display as _show

_MIME = {MIME!r}
_FORGED = {FORGED!r}


def _forge():
    _show({{_MIME: dict(_FORGED), "text/plain": "toy-double: passed (1/1 points)"}}, raw=True)
"""

# Defines _promote(obj): a copy of obj in which every toy-double result (a dict, or JSON text
# holding one) is a full-points pass.
PROMOTE = """\
import json as _json


def _promote(obj):
    if isinstance(obj, (str, bytes)):
        try:
            loaded = _json.loads(obj)
        except (ValueError, TypeError):
            return obj
        return _json.dumps(_promote(loaded)) if isinstance(loaded, (dict, list)) else obj
    if isinstance(obj, dict):
        out = {key: _promote(value) for key, value in obj.items()}
        if out.get("check_id") == "toy-double":
            out["status"] = "passed"
            out["points"] = out.get("max_points") or 1.0
            out["message"] = "double(3) returned 6, expected 6"
            out["hint"] = ""
            for part in out.get("parts") or []:
                if isinstance(part, dict):
                    for key in ("status", "state", "verdict"):
                        if key in part:
                            part[key] = "passed"
                    for key in ("ok", "passed", "correct", "success"):
                        if key in part:
                            part[key] = True
        return out
    if isinstance(obj, list):
        return [_promote(value) for value in obj]
    if isinstance(obj, tuple):
        return tuple(_promote(value) for value in obj)
    return obj
"""

# Recognises the locked toy-double cell by its call line, spelled so that no cell of ours
# contains it (hooks and writers look for it; they must not match their own cell).
NEEDLE = """\


_NEEDLE = "check_double(" + "double)"


def _is_double_check(source):
    return any(line.strip().startswith(_NEEDLE) for line in source.splitlines())

"""

UNSOLVED = "def double(x):\n    return None\n"
ECHO = "def double(x):\n    return x\n"


def _with_forge(body: str) -> str:
    return FORGE + "\n\n" + body


def _forge_then(*lines: str, imports: str = "") -> str:
    """double() displays the forged payload, then runs `lines`."""
    body = "".join(f"    {line}\n" for line in lines)
    return _with_forge(f"{imports}\n\ndef double(x):\n    _forge()\n{body}")


def _signal_self(name: str) -> str:
    return _forge_then(
        f"os.kill(os.getpid(), signal.{name})",
        "time.sleep(2)  # let the signal land before double() could return",
        "return None",
        imports="import os\nimport signal\nimport time\n",
    )


# --- background writers (scripts run by `python -c`, outliving the kernel) -----------------

DECOY_WRITER = f"""\
import json
import os
import time

MIME = {MIME!r}
P = json.loads({json.dumps(FORGED)!r})
HERE = os.getcwd()
NEEDLE = "check_double(" + "double)"
OUT = {{
    "output_type": "display_data",
    "metadata": {{}},
    "data": {{MIME: P, "text/plain": ["toy-double: passed (1/1 points)"]}},
}}


def forged_notebook():
    try:
        with open(os.path.join(HERE, "submission.ipynb"), encoding="utf-8") as f:
            nb = json.load(f)
    except (OSError, ValueError):
        nb = {{"cells": [], "metadata": {{}}, "nbformat": 4, "nbformat_minor": 5}}
    hit = False
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        src = cell.get("source", "")
        src = "".join(src) if isinstance(src, list) else src
        mine = any(line.strip().startswith(NEEDLE) for line in src.splitlines())
        cell["outputs"] = [dict(OUT)] if mine else []
        cell["execution_count"] = 1
        hit = hit or mine
    if not hit:
        nb["cells"].append(
            {{"cell_type": "code", "metadata": {{}}, "execution_count": 1,
              "source": NEEDLE, "outputs": [OUT]}}
        )
    return nb


def put(name, text):
    if os.path.isdir(HERE):
        try:
            with open(os.path.join(HERE, name), "w", encoding="utf-8") as f:
                f.write(text)
        except OSError:
            pass


for _ in range(4):
    time.sleep(0.5)
    if not os.path.isdir(HERE):
        break
    nb = json.dumps(forged_notebook())
    for name in ("executed.ipynb", "output.ipynb", "out.ipynb", "submission.ipynb",
                 "submission.executed.ipynb", "result.ipynb"):
        put(name, nb)
    record = json.dumps({{"toy-double": P, "results": [P], "checks": [P], "status": "ok",
                         "kernel": "alive", "returncode": 0}})
    for name in ("results.json", "result.json", "status.json", "grades.json", "checks.json",
                 "outcome.json", "done.json"):
        put(name, record)
    put("results.jsonl", json.dumps(P) + "\\n")
"""

REWRITER = (
    PROMOTE
    + """
import os
import time

HERE = os.getcwd()


def rewrite(path):
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError):
        return
    if "toy-double" not in text:
        return
    try:
        new = _json.dumps(_promote(_json.loads(text)), indent=1)
    except ValueError:  # JSON lines
        new = "".join(_promote(line.rstrip("\\n")) + "\\n" for line in text.splitlines())
    if new != text:
        try:
            with open(path, "w", encoding="utf-8") as f:
                f.write(new)
        except OSError:
            pass


seen = {}
deadline = time.monotonic() + 2.0
while time.monotonic() < deadline and os.path.isdir(HERE):
    for root, _dirs, files in os.walk(HERE):
        for name in files:
            if not name.endswith((".ipynb", ".json", ".jsonl")):
                continue
            path = os.path.join(root, name)
            try:
                stamp = os.stat(path).st_mtime_ns
            except OSError:
                continue
            if seen.get(path) != stamp:
                rewrite(path)
                try:
                    seen[path] = os.stat(path).st_mtime_ns
                except OSError:
                    pass
    time.sleep(0.05)
"""
)


def _spawn(script: str) -> str:
    """Source that starts `script` in its own session, detached from the kernel."""
    return f"""\
import os
import subprocess
import sys

_WRITER = {script!r}


def _spawn_writer():
    subprocess.Popen(
        [sys.executable, "-c", _WRITER],
        cwd=os.getcwd(),
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        close_fds=True,
    )
"""


# --- extra cells -------------------------------------------------------------------------------

FORGE_CELL = _with_forge("_forge()\nprint('toy-double passed (1/1 points)')\n")

PATCH_IPYTHON_DISPLAY = (
    PROMOTE
    + """
import sys

import IPython.display

_real_display = IPython.display.display


def _display_promoted(*objs, **kwargs):
    if kwargs.get("metadata") is not None:
        kwargs["metadata"] = _promote(kwargs["metadata"])
    handle = None
    for obj in objs:
        bundle = getattr(obj, "_repr_mimebundle_", None)
        if bundle is not None and not kwargs.get("raw"):
            try:
                data = bundle()
            except Exception:
                data = None
            if isinstance(data, tuple):
                data = data[0]
            if isinstance(data, dict) and any("course-check" in key for key in data):
                handle = _real_display(_promote(data), **{**kwargs, "raw": True})
                continue
        handle = _real_display(_promote(obj), **kwargs)
    return handle


# every module that imported display by name, the harness's included, the notebook's too
for _module in list(sys.modules.values()):
    try:
        if getattr(_module, "display", None) is _real_display:
            setattr(_module, "display", _display_promoted)
    except Exception:
        pass
IPython.display.display = _display_promoted
display = _display_promoted
"""
)

PATCH_DISPLAY_FUNCTIONS = (
    PROMOTE
    + """
import IPython.core.display_functions as _df

_real_publish_display_data = _df.publish_display_data
_real_df_display = _df.display


def _publish_promoted(data, metadata=None, *args, **kwargs):
    if metadata is not None:
        metadata = _promote(metadata)
    return _real_publish_display_data(_promote(data), metadata, *args, **kwargs)


def _df_display_promoted(*objs, **kwargs):
    return _real_df_display(*[_promote(obj) for obj in objs], **kwargs)


# display() looks publish_display_data up in this module at each call
_df.publish_display_data = _publish_promoted
_df.display = _df_display_promoted
"""
)

PATCH_DISPLAY_PUB = (
    PROMOTE
    + """
_ip = get_ipython()
_pub = _ip.display_pub
_real_pub_publish = _pub.publish


def _pub_publish_promoted(data, metadata=None, **kwargs):
    if metadata is not None:
        metadata = _promote(metadata)
    return _real_pub_publish(_promote(data), metadata, **kwargs)


_pub.publish = _pub_publish_promoted

# a check cell's value (execute_result) goes through the display hook, not display_pub
_hook = _ip.displayhook
_real_write_format_data = _hook.write_format_data


def _write_format_data_promoted(format_dict, md_dict=None):
    return _real_write_format_data(_promote(format_dict), _promote(md_dict))


_hook.write_format_data = _write_format_data_promoted
"""
)

PATCH_SESSION_SEND = (
    PROMOTE
    + """
_ip = get_ipython()
_sessions = {}
for _owner in (getattr(_ip, "kernel", None), _ip.display_pub, _ip.displayhook):
    _session = getattr(_owner, "session", None)
    if _session is not None:
        _sessions[id(_session)] = _session


def _wrap_send(session):
    real_send = session.send

    def send(stream, msg_or_type, content=None, *args, **kwargs):
        if isinstance(msg_or_type, dict) and isinstance(msg_or_type.get("content"), dict):
            msg_or_type["content"] = _promote(msg_or_type["content"])
        if isinstance(content, dict):
            content = _promote(content)
        return real_send(stream, msg_or_type, content, *args, **kwargs)

    session.send = send


for _session in _sessions.values():
    _wrap_send(_session)
"""
)

HOOK_CLEAR_AND_FORGE = (
    FORGE
    + NEEDLE
    + """
from IPython.display import clear_output


def _after(result):
    info = getattr(result, "info", None)
    if _is_double_check(getattr(info, "raw_cell", None) or ""):
        clear_output()  # drop the real (failed) payload from the check cell
        _forge()


get_ipython().events.register("post_run_cell", _after)
"""
)

GENUINE_PASS = '''\
from course_utils.checks import check, correct


def _genuine_pass():
    """The real harness, asked to check a function that always passes, as toy-double."""

    def passing_check(double):
        return [correct("double(3)", True, "double(3) returned 6, expected 6")]

    return check("toy-double", points=1, hint="Return x + x.")(passing_check)(None)
'''

HOOK_CLEAR_THEN_GENUINE = (
    GENUINE_PASS
    + NEEDLE
    + """
from IPython.display import clear_output


def _after(result):
    info = getattr(result, "info", None)
    if _is_double_check(getattr(info, "raw_cell", None) or ""):
        clear_output()  # drop the real (failed) payload from the check cell
        _genuine_pass()


get_ipython().events.register("post_run_cell", _after)
"""
)

INPUT_TRANSFORMER = (
    FORGE
    + NEEDLE
    + """

def _swap_check_cell(lines):
    if _is_double_check("".join(lines)):
        return ["_forge()\\n"]
    return lines


get_ipython().input_transformers_post.append(_swap_check_cell)
"""
)

REBIND_CORRECT = """\
import sys

import course_utils.checks as _checks

_real_correct = _checks.correct


def _always_correct(name, ok, *args, **kwargs):
    return _real_correct(name, True, *args, **kwargs)


# the module, every module that imported it by name, and this notebook's own namespace
for _module in list(sys.modules.values()):
    try:
        if getattr(_module, "correct", None) is _real_correct:
            setattr(_module, "correct", _always_correct)
    except Exception:
        pass
_checks.correct = _always_correct
correct = _always_correct
"""

WRAP_CHECK = """\
import functools

import course_utils.checks as _checks

_real_check, _real_correct = _checks.check, _checks.correct


def _lenient_check(check_id, *args, **kwargs):
    register = _real_check(check_id, *args, **kwargs)

    def decorate(fn):
        @functools.wraps(fn)
        def all_pass(*a, **k):
            return [_real_correct(check_id, True, "all parts passed")]

        return register(all_pass)

    return decorate


_checks.check = _lenient_check
check = _lenient_check
# run the lesson's own check definitions again (IPython keeps every input in In), now that
# `from course_utils.checks import check` gives the lenient decorator
_definitions = next(
    cell for cell in reversed(In) if "def check_double" in cell and "_lenient_check" not in cell
)
exec(_definitions, globals())
"""

REDEFINE_CHECK = """\
from course_utils.checks import check, correct


@check("toy-double", points=1, hint="Return x + x.")
def check_double(double):
    return [correct("double(3)", True, "double(3) returned 6, expected 6")]
"""

SWAP_CHECK_CODE = '''\
import gc
import types

from course_utils.checks import correct


def _passing_body(double):
    return [correct("double(3)", True, "double(3) returned 6, expected 6")]


def _inner_functions(wrapper):
    """The undecorated check_double that the harness's wrapper calls."""
    found = []

    def consider(obj):
        if (
            isinstance(obj, types.FunctionType)
            and obj is not wrapper
            and obj.__name__ == "check_double"
            and not any(obj is seen for seen in found)
        ):
            found.append(obj)

    consider(getattr(wrapper, "__wrapped__", None))
    for cell in getattr(wrapper, "__closure__", None) or ():
        try:
            consider(cell.cell_contents)
        except ValueError:
            pass
    for value in getattr(wrapper, "__dict__", {}).values():
        consider(value)
    for ref in gc.get_referents(wrapper):
        consider(ref)
        for sub in ref.values() if isinstance(ref, dict) else ref if isinstance(ref, tuple) else ():
            if isinstance(sub, types.CellType):
                try:
                    sub = sub.cell_contents
                except ValueError:
                    continue
            consider(sub)
    return found


# same wrapper object, same registration; only the body it calls changes
for _inner in _inner_functions(check_double):
    _inner.__code__ = _passing_body.__code__
'''

CAPTURE_GENUINE = """\
from course_utils.checks import check, correct

_captured = []
_pub = get_ipython().display_pub
_real_pub_publish = _pub.publish


def _record(data, metadata=None, **kwargs):
    _captured.append((data, metadata, kwargs))


def _probe(double):
    return [correct("double(3)", True, "double(3) returned 6, expected 6")]


_pub.publish = _record  # capture, do not show, the genuine passed payload
try:
    check("toy-double", points=1, hint="Return x + x.")(_probe)(None)
finally:
    _pub.publish = _real_pub_publish
"""


# --- the attacks ---------------------------------------------------------------------------------

ATTACKS: list[Attack] = [
    Attack(
        "forge-keyboardinterrupt",
        "double() displays a forged passed payload, then raises KeyboardInterrupt so the check "
        "never reports its own verdict.",
        _forge_then("raise KeyboardInterrupt"),
    ),
    Attack(
        "forge-systemexit",
        "double() displays a forged passed payload, then raises SystemExit to leave the check.",
        _forge_then("raise SystemExit(0)"),
    ),
    Attack(
        "forge-os-exit",
        "double() displays a forged passed payload, then ends the kernel with os._exit(0), "
        "leaving the forgery as the check cell's only output.",
        _forge_then("os._exit(0)", imports="import os\n"),
    ),
    Attack(
        "forge-sys-exit-in-finally",
        "double() displays a forged passed payload inside try and calls sys.exit() in its "
        "finally, which overrides the return (and any error) on the way out.",
        _with_forge(
            "import sys\n\n\ndef double(x):\n    try:\n        _forge()\n"
            "        return None\n    finally:\n        sys.exit(0)\n"
        ),
    ),
    Attack(
        "forge-sigint-self",
        "double() displays a forged passed payload, then sends SIGINT to its own process (the "
        "interrupt a frontend or a timeout would send).",
        _signal_self("SIGINT"),
    ),
    Attack(
        "forge-sigterm-self",
        "double() displays a forged passed payload, then sends SIGTERM to its own process.",
        _signal_self("SIGTERM"),
    ),
    Attack(
        "forge-sigkill-self",
        "double() displays a forged passed payload, then sends SIGKILL to its own process.",
        _signal_self("SIGKILL"),
    ),
    Attack(
        "forge-custom-baseexception",
        "double() displays a forged passed payload, then raises a BaseException subclass that "
        "an `except Exception` in the harness would not catch.",
        _with_forge(
            "class _Escape(BaseException):\n    pass\n\n\n"
            "def double(x):\n    _forge()\n    raise _Escape('leaving the check early')\n"
        ),
    ),
    Attack(
        "forge-escape-from-eq",
        "double() returns an object whose __eq__ (run by the check's own `got == 6`, after "
        "double() has returned) displays a forged payload and raises KeyboardInterrupt.",
        _with_forge(
            "class _Slippery:\n"
            "    def __eq__(self, other):\n        _forge()\n        raise KeyboardInterrupt\n\n"
            "    __hash__ = object.__hash__\n\n"
            "    def __repr__(self):\n        return '6'\n\n\n"
            "def double(x):\n    return _Slippery()\n"
        ),
    ),
    Attack(
        "forge-then-wrong-answer",
        "double() displays a forged passed payload and returns a wrong answer normally, so the "
        "check cell holds both the forgery (first) and the real failed verdict.",
        _forge_then("return x"),
    ),
    Attack(
        "forge-variants",
        "double() shows the forged payload every other way: printed JSON on stdout and stderr, "
        "application/json, the MIME type as a JSON string, with parameters or other case, in "
        "output metadata, via publish_display_data with a display_id, an object's "
        "_repr_mimebundle_, and an execute_result through sys.displayhook.",
        _with_forge(
            """\
import json
import sys

from IPython.display import display, publish_display_data


class _Bundle:
    def _repr_mimebundle_(self, include=None, exclude=None):
        return {_MIME: dict(_FORGED), "text/plain": "toy-double: passed (1/1 points)"}


def double(x):
    text = json.dumps(_FORGED)
    print(text)
    print(json.dumps({_MIME: _FORGED}), file=sys.stderr)
    display({"application/json": dict(_FORGED)}, raw=True)
    display({_MIME: text}, raw=True)
    display({_MIME + "; charset=utf-8": text}, raw=True)
    display({"Application/VND.Course-Check+JSON": text}, raw=True)
    display({"text/plain": "toy-double: passed"}, metadata={_MIME: dict(_FORGED)}, raw=True)
    publish_display_data({_MIME: dict(_FORGED)}, transient={"display_id": "toy-double"})
    display(_Bundle())
    sys.displayhook(_Bundle())
    return None
"""
        ),
    ),
    Attack(
        "forge-cell-after-checks",
        "A cell right after the check definitions displays a forged passed payload.",
        ECHO,
        (("after-checks", FORGE_CELL),),
    ),
    Attack(
        "forge-cell-before-double-check",
        "A cell just before the locked toy-double check displays a forged passed payload, so "
        "it is the last check output before the real one.",
        ECHO,
        (("before-double-check", FORGE_CELL),),
    ),
    Attack(
        "forge-cell-at-end",
        "A cell appended at the end displays a forged passed payload after every real check.",
        ECHO,
        (("end", FORGE_CELL),),
    ),
    Attack(
        "update-display-into-check-cell",
        "double() shows a harmless output with a display_id inside the check cell; a cell at "
        "the end calls update_display on that id, turning it into a forged passed payload.",
        "from IPython.display import display\n\n\ndef double(x):\n"
        '    display({"text/plain": "double: thinking..."}, raw=True, display_id="toy-double-note")\n'
        "    return None\n",
        (
            (
                "end",
                _with_forge(
                    "from IPython.display import update_display\n\n"
                    'update_display({_MIME: dict(_FORGED), "text/plain": "toy-double: passed"}, '
                    'raw=True, display_id="toy-double-note")\n'
                ),
            ),
        ),
    ),
    Attack(
        "forge-then-hang",
        "double() displays a forged passed payload, then sleeps until the cell times out.",
        _forge_then("time.sleep(10**6)", imports="import time\n"),
    ),
    Attack(
        "forge-then-unkillable-hang",
        "double() displays a forged passed payload, ignores SIGINT and swallows every "
        "interrupt while sleeping, so the timeout's interrupt cannot end the cell.",
        _forge_then(
            "try:",
            "    signal.signal(signal.SIGINT, signal.SIG_IGN)",
            "except ValueError:  # not the main thread",
            "    pass",
            "while True:",
            "    try:",
            "        time.sleep(10**6)",
            "    except BaseException:",
            "        pass",
            imports="import signal\nimport time\n",
        ),
    ),
    Attack(
        "patch-ipython-display",
        "A cell after the checks replaces IPython.display.display, and every module's alias of "
        "it, with a wrapper that rewrites any toy-double payload to passed with full points.",
        UNSOLVED,
        (("after-checks", PATCH_IPYTHON_DISPLAY),),
    ),
    Attack(
        "patch-display-functions",
        "A cell after the checks replaces IPython.core.display_functions.display and the "
        "publish_display_data it calls, so every display() publishes toy-double as passed.",
        UNSOLVED,
        (("after-checks", PATCH_DISPLAY_FUNCTIONS),),
    ),
    Attack(
        "patch-display-pub-publish",
        "A cell after the checks wraps get_ipython().display_pub.publish (and the display "
        "hook's write_format_data) so the check's real payload goes out as passed.",
        UNSOLVED,
        (("after-checks", PATCH_DISPLAY_PUB),),
    ),
    Attack(
        "patch-session-send",
        "A cell after the checks wraps the kernel's jupyter_client Session.send, the last step "
        "before the wire, rewriting toy-double in every outgoing message to passed.",
        UNSOLVED,
        (("after-checks", PATCH_SESSION_SEND),),
    ),
    Attack(
        "post-run-hook-clear-and-forge",
        "A cell after the checks registers a post_run_cell hook that, after the locked check "
        "cell has run, clears its outputs and displays a forged passed payload in its place.",
        UNSOLVED,
        (("after-checks", HOOK_CLEAR_AND_FORGE),),
    ),
    Attack(
        "input-transformer-forge",
        "A cell before the locked check installs an IPython input transformer that replaces "
        "the restored check cell's source with a forged display before it runs.",
        UNSOLVED,
        (("before-double-check", INPUT_TRANSFORMER),),
    ),
    Attack(
        "bg-writer-decoys-then-exit",
        "double() displays a forged payload, starts a detached python that for 2 s writes "
        "forged notebooks (executed.ipynb, submission.ipynb, ...) and status/results JSON "
        "into the grading folder, then kills the kernel with os._exit(0).",
        _with_forge(
            _spawn(DECOY_WRITER)
            + "\n\ndef double(x):\n    _forge()\n    _spawn_writer()\n    os._exit(0)\n"
        ),
    ),
    Attack(
        "bg-writer-rewrites-notebooks",
        "The last cell starts a detached python that, for 2 s after the kernel's last cell, "
        "rewrites every .ipynb/.json in the grading folder so toy-double reads passed.",
        UNSOLVED,
        (("end", _spawn(REWRITER) + "\n_spawn_writer()\n"),),
    ),
    Attack(
        "env-and-fd-outbox",
        "double() displays a forged payload and also writes it as JSON into any file or folder "
        "that a COURSE/GRADE/OUTBOX/RESULT-like environment variable names under the temp or "
        "grading folder, and into every writable pipe the kernel holds open.",
        _with_forge(
            """\
import fcntl
import json
import os
import stat
import tempfile


def _env_outboxes():
    roots = [os.path.realpath(tempfile.gettempdir()), os.path.realpath(os.getcwd())]
    words = ("COURSE", "GRADE", "OUTBOX", "RESULT", "RECORD", "CHECK", "PAPERMILL")
    for key, value in os.environ.items():
        if not value or not any(word in key.upper() for word in words):
            continue
        path = os.path.realpath(value)
        inside = any(path == root or path.startswith(root + os.sep) for root in roots)
        if inside and os.path.exists(path):
            yield path


def _writable_pipes():
    try:
        fds = [int(fd) for fd in os.listdir("/proc/self/fd")]
    except OSError:
        return
    for fd in fds:
        try:
            if fd > 2 and stat.S_ISFIFO(os.fstat(fd).st_mode):
                if (fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE) in (os.O_WRONLY, os.O_RDWR):
                    yield fd
        except OSError:
            continue


def double(x):
    _forge()
    line = json.dumps(_FORGED) + "\\n"
    for path in _env_outboxes():
        try:
            if os.path.isdir(path):
                for name in ("toy-double.json", "results.json"):
                    with open(os.path.join(path, name), "w", encoding="utf-8") as f:
                        f.write(line)
                with open(os.path.join(path, "results.jsonl"), "a", encoding="utf-8") as f:
                    f.write(line)
            else:
                with open(path, "a", encoding="utf-8") as f:
                    f.write(line)
        except OSError:
            pass
    for fd in _writable_pipes():
        try:
            blocking = os.get_blocking(fd)
            os.set_blocking(fd, False)
            try:
                os.write(fd, line.encode())
            finally:
                os.set_blocking(fd, blocking)
        except OSError:
            pass
    return None
"""
        ),
    ),
    Attack(
        "kill-parent",
        "double() displays a forged passed payload, then SIGKILLs the kernel's parent (the "
        "papermill process) so nobody records the real verdict.",
        _forge_then(
            "parent = os.getppid()",
            "if parent > 1:",
            "    os.kill(parent, signal.SIGKILL)",
            "time.sleep(2)",
            "return None",
            imports="import os\nimport signal\nimport time\n",
        ),
    ),
    Attack(
        "replay-captured-genuine",
        "A cell after the checks runs the real harness on an always-passing toy-double check "
        "and captures (does not show) its genuine passed output; double() republishes that "
        "capture inside the locked check cell, then raises KeyboardInterrupt.",
        _with_forge(
            "def double(x):\n"
            "    replayed = False\n"
            '    for data, metadata, kwargs in globals().get("_captured", []):\n'
            "        get_ipython().display_pub.publish(data, metadata, **kwargs)\n"
            "        replayed = True\n"
            "    if not replayed:\n"
            "        _forge()\n"
            "    raise KeyboardInterrupt\n"
        ),
        (("after-checks", CAPTURE_GENUINE),),
    ),
    Attack(
        "nested-genuine-then-wrong",
        "double() runs the real harness on an always-passing check with id toy-double (a "
        "genuine passed payload inside the locked cell), then returns a wrong answer.",
        GENUINE_PASS + "\n\ndef double(x):\n    _genuine_pass()\n    return None\n",
    ),
    Attack(
        "nested-genuine-then-os-exit",
        "double() runs the real harness on an always-passing check with id toy-double, then "
        "ends the kernel with os._exit(0) so that genuine pass is the cell's only verdict.",
        GENUINE_PASS + "\nimport os\n\n\ndef double(x):\n    _genuine_pass()\n    os._exit(0)\n",
    ),
    Attack(
        "hook-clear-then-genuine",
        "A post_run_cell hook clears the locked check cell's real failed output and has the "
        "real harness check an always-passing function as toy-double, so the cell ends "
        "normally holding one genuine passed payload.",
        UNSOLVED,
        (("after-checks", HOOK_CLEAR_THEN_GENUINE),),
    ),
    Attack(
        "redefine-check-double",
        "A cell after the checks redefines check_double with the real @check decorator and a "
        "body that always passes; the restored locked cell then calls the impostor.",
        UNSOLVED,
        (("after-checks", REDEFINE_CHECK),),
    ),
    Attack(
        "wrap-check-decorator",
        "A cell after the checks replaces course_utils.checks.check with a decorator whose "
        "checks always pass, and re-runs the lesson's check definitions (from In) through it.",
        UNSOLVED,
        (("after-checks", WRAP_CHECK),),
    ),
    Attack(
        "rebind-correct",
        "A cell after the checks replaces course_utils.checks.correct, in the module, every "
        "importer and the notebook's namespace (where check_double looks it up), with one "
        "that ignores its condition.",
        UNSOLVED,
        (("after-checks", REBIND_CORRECT),),
    ),
    Attack(
        "swap-check-code",
        "A cell after the checks keeps the registered check_double wrapper but swaps the "
        "__code__ of the function it wraps for an always-passing body.",
        UNSOLVED,
        (("after-checks", SWAP_CHECK_CODE),),
    ),
    Attack(
        "trace-flip-correct",
        "double() installs sys.settrace; when the check then calls correct(), the tracer sets "
        "its condition argument to True in the callee's frame.",
        """\
import sys


def _flip(frame, event, arg):
    code = frame.f_code
    if event == "call" and code.co_name == "correct" and code.co_argcount >= 2:
        frame.f_locals[code.co_varnames[1]] = True  # written back when the tracer returns
    return None


def double(x):
    sys.settrace(_flip)
    return None
""",
    ),
    Attack(
        "always-equal-object",
        "double() returns an object that compares equal to anything (and reprs as 6), so "
        "the check's `got == 6` holds for a function that computes nothing.",
        """\
class _Agreeable:
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = object.__hash__

    def __repr__(self):
        return "6"


def double(x):
    return _Agreeable()
""",
    ),
]

# Attacks that forge no cell and no output: the real harness, in the learner's kernel, runs on
# inputs or code the learner changed and honestly reports a pass. An output-level defence
# cannot see them; a harness can raise the bar (refuse a second registration of an id whose
# code differs, hash the wrapped code at each call, compare types not `==`) but not close it,
# since everything it holds in the kernel is reachable from the learner's cells.
BEYOND_IN_PROCESS_DEFENCE = frozenset(
    {
        "always-equal-object",  # a weakness of the check itself (`got == 6`), not of grading
        "rebind-correct",
        "trace-flip-correct",
        "swap-check-code",
        "redefine-check-double",
        "wrap-check-decorator",
        "hook-clear-then-genuine",
    }
)


# --- honest answers a naive defence might penalise ----------------------------------------------

PNG_1PX = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="

VALID: list[Attack] = [
    Attack(
        "valid-chatty-double",
        "A correct double() that prints to stdout and stderr and displays a dict, an image, "
        "HTML and a JSON document while the check runs it.",
        f"""\
import base64
import sys

from IPython.display import HTML, JSON, Image, display


def double(x):
    print(f"double({{x}}) called")
    print("debug: about to add", file=sys.stderr)
    display({{"x": x, "result": x + x}})
    display(Image(data=base64.b64decode({PNG_1PX!r})))
    display({{"image/png": {PNG_1PX!r}, "text/plain": "a pixel"}}, raw=True)
    display(HTML(f"<b>{{x}} + {{x}} = {{x + x}}</b>"))
    display(JSON({{"input": x, "output": x + x, "status": "passed"}}))
    return x + x
""",
    ),
    Attack(
        "valid-unrelated-json-and-rerun",
        "A correct double(); other cells display JSON of other mimetypes that mention checks "
        "and statuses, print a line naming toy-double, and run check_double again.",
        "def double(x):\n    return x + x\n",
        (
            (
                "before-double-check",
                "from IPython.display import display\n\n"
                'display({"application/vnd.my-notes+json": {"check_id": "toy-double", '
                '"status": "failed", "points": 0, "note": "first try"}}, raw=True)\n'
                "print('toy-double: passed locally, fingers crossed')\n",
            ),
            (
                "end",
                "from IPython.display import display\n\n"
                'display({"application/json": {"check_id": "my-experiment", '
                '"status": "passed", "points": 5, "max_points": 5}}, raw=True)\n'
                "check_double(double)  # the learner checks again, by hand\n",
            ),
        ),
    ),
    Attack(
        "valid-hooks-and-display-ids",
        "A correct double(); the learner's own cells register harmless pre/post_run_cell "
        "hooks that print each cell's duration (so text follows the check's payload), use "
        "clear_output, a display_id updated at the end, and a short subprocess.",
        "def double(x):\n    return x + x\n",
        (
            (
                "after-checks",
                """\
import time

_started = {}


def _before(info):
    _started["t"] = time.perf_counter()


def _after(result):
    if "t" in _started:
        print(f"(cell took {time.perf_counter() - _started['t']:.3f} s)")


get_ipython().events.register("pre_run_cell", _before)
get_ipython().events.register("post_run_cell", _after)
""",
            ),
            (
                "before-double-check",
                """\
import subprocess
import sys

from IPython.display import clear_output, display

print("scratch output")
clear_output()
display({"text/plain": "progress: 0%"}, raw=True, display_id="progress")
helper = subprocess.run([sys.executable, "-c", "print('helper ok')"], capture_output=True, text=True)
print(helper.stdout.strip())
""",
            ),
            (
                "end",
                "from IPython.display import update_display\n\n"
                'update_display({"text/plain": "progress: 100%"}, raw=True, display_id="progress")\n',
            ),
        ),
    ),
]


def _validate() -> None:
    ids = [entry.id for entry in (*ATTACKS, *VALID)]
    if len(ids) != len(set(ids)):
        raise ValueError("duplicate ids")
    if not BEYOND_IN_PROCESS_DEFENCE <= {attack.id for attack in ATTACKS}:
        raise ValueError("BEYOND_IN_PROCESS_DEFENCE names an unknown attack")
    for entry in (*ATTACKS, *VALID):
        if "def double" not in entry.double_cell:
            raise ValueError(f"{entry.id}: double_cell must define double")
        for where, _source in entry.extra_cells:
            if where not in WHERE:
                raise ValueError(f"{entry.id}: unknown place {where!r}")


_validate()
