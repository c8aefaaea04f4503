"""Where a submission's kernel runs: a sandbox per submission, from an existing tool.

`bwrap` (bubblewrap, https://github.com/containers/bubblewrap; Debian's `bubblewrap` package):
the kernel runs in its own user, PID, network, IPC and mount namespaces as an unprivileged
user. It sees the system and the Python environment read-only, the learner edition of the
harness (kernel_harness.py) read-only at HARNESS_MOUNT, and, writable, only its own folder. It
does not see the course's solutions, the other submissions, the grades, the grader's home or
any process outside (nothing it starts outlives it: its PID namespace ends with it); it has no
network but its own loopback (lessons 06 and 13 launch two processes over it). As root, the
grader starts bwrap as `nobody`, so inside it is nobody outside too.

`user`, where bwrap cannot run (inside a container without user namespaces, as on Gradescope)
and the grader is root: the kernel runs as a user made for grading (`course-grader-K`, one
per concurrent slot), sees the harness as a folder it may read but not write, and writes only
its own folder. It sees what that user may read (the log says what it could), shares the
network, and every process of that user is killed when the submission is done.

`none`, for debugging only: the kernel runs as the grader. The judge and the answer-free
harness still apply; the isolation does not, and every log line says so.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError

FULL_HARNESS = Path(__file__).resolve().parents[1]  # the judge's course_utils

LEVELS = ("auto", "bwrap", "user", "none")
HARNESS_MOUNT = "/course-harness"  # where the kernel's harness appears inside bwrap
NOBODY = 65534
USER_PREFIX = "course-grader-"
MAX_SLOTS = 32
# what of the grader's environment reaches the kernel (the rest stays out: names included)
PASSED_ON = (
    "PATH",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "OMP_WAIT_POLICY",
    "CC",
    "CXX",
    "TRITON_INTERPRET",  # lesson 17 checks Triton kernels on a CPU through the interpreter
)


@dataclass(frozen=True)
class Isolation:
    """How one kernel is isolated: `level` (bwrap, user, none), and for `user` the uid."""

    level: str
    uid: int | None = None
    gid: int | None = None
    user: str = ""

    def describe(self) -> str:
        if self.level == "bwrap":
            return (
                "bwrap sandbox (nobody inside; no network; harness and Python read-only; only "
                "its own folder writable; own PID namespace)"
            )
        if self.level == "user":
            return (
                f"user {self.user} (uid {self.uid}; bwrap unavailable here: its own folder "
                "writable, harness read-only, its processes killed at the end; network shared)"
            )
        return "NONE: the learner's code ran as the grader, unisolated (--isolation none)"


def bwrap_works() -> str:
    """'' when bwrap can start a sandbox here, else why not."""
    path = shutil.which("bwrap")
    if path is None:
        return "bwrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    cmd = [path, "--unshare-all", "--ro-bind", "/", "/", "--proc", "/proc", "true"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap did not run ({type(exc).__name__})"
    if done.returncode != 0:
        return f"bwrap cannot make a sandbox here: {done.stderr.strip()[:200]}"
    return ""


def choose(requested: str = "auto") -> Isolation:
    """The isolation to grade with: bwrap where it works, else a grading user (root only);
    `none` only when asked. Raises UsageError when what was asked cannot be had."""
    if requested not in LEVELS:
        raise UsageError(f"--isolation {requested}: choose one of {', '.join(LEVELS)}")
    if requested == "none":
        return Isolation("none")
    why = bwrap_works() if requested in ("auto", "bwrap") else "not asked for"
    if not why:
        return Isolation("bwrap")
    if requested == "bwrap":
        raise UsageError(f"--isolation bwrap: {why}")
    if os.geteuid() != 0:
        raise UsageError(
            f"no sandbox for the learner's code here: {why}, and a grading user needs root. "
            "Install bubblewrap (or enable user namespaces), grade as root, or pass "
            "--isolation none to run submissions unisolated (debugging only)"
        )
    return Isolation("user")


def _as_nobody(cmd: list[str]) -> list[str]:
    """As root, start `cmd` as nobody (bwrap then maps nobody inside to nobody outside)."""
    if os.geteuid() != 0:
        return cmd
    return [
        shutil.which("setpriv") or "setpriv",
        f"--reuid={NOBODY}",
        f"--regid={NOBODY}",
        "--clear-groups",
        *cmd,
    ]


# --- the grading user's slot (user isolation) ---------------------------------------------------


@contextlib.contextmanager
def user_slot(isolation: Isolation) -> Iterator[Isolation]:
    """For `user` isolation, a grading user no other submission on this machine uses while
    the block runs (a lock file per slot), created if missing; its processes are killed at
    the end. Other levels pass through."""
    if isolation.level != "user":
        yield isolation
        return
    for slot in range(MAX_SLOTS):
        lock = open(Path(tempfile.gettempdir()) / f"{USER_PREFIX}{slot}.lock", "w")  # noqa: SIM115
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            continue
        try:
            name = f"{USER_PREFIX}{slot}"
            uid, gid = _grading_user(name)
            taken = Isolation("user", uid, gid, name)
            kill_user_processes(uid)
            yield taken
            kill_user_processes(uid)
        finally:
            lock.close()
        return
    raise UsageError(f"all {MAX_SLOTS} grading users are busy on this machine")


def _grading_user(name: str) -> tuple[int, int]:
    import pwd

    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
            check=True,
            capture_output=True,
        )
        entry = pwd.getpwnam(name)
    return entry.pw_uid, entry.pw_gid


def kill_user_processes(uid: int) -> int:
    """Kill every process of `uid` (the grading user's: nothing of a submission outlives it)."""
    import psutil

    killed = 0
    for proc in psutil.process_iter(["uids"]):
        try:
            if proc.info["uids"] and proc.info["uids"].real == uid:
                proc.kill()
                killed += 1
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return killed


# --- the kernel's command and environment -------------------------------------------------------


def kernel_environment(
    base: dict[str, str], box: Path, harness: Path, isolation: Isolation
) -> dict[str, str]:
    """The kernel's whole environment: PASSED_ON from `base`, the course's own settings
    (COURSE_*, the backend and thread settings the grader chose), and paths in its folder."""
    env = {k: v for k, v in base.items() if k in PASSED_ON}
    env |= {k: v for k, v in base.items() if k.startswith("COURSE_") or k in ("MPLBACKEND",)}
    env.pop("COURSE_PLATFORM", None)  # read by the judge, not the kernel
    home = box / "home"
    tmp = "/tmp" if isolation.level == "bwrap" else str(box / "tmp")
    env |= {
        "HOME": str(home),
        "TMPDIR": tmp,
        "PYTHONPATH": HARNESS_MOUNT if isolation.level == "bwrap" else str(harness),
        "PYTHONNOUSERSITE": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "IPYTHONDIR": str(home / ".ipython"),
        "XDG_CACHE_HOME": str(box / "cache"),
        "MPLCONFIGDIR": str(box / "cache" / "matplotlib"),
        "TORCHINDUCTOR_CACHE_DIR": str(box / "cache" / "inductor"),
        "TRITON_CACHE_DIR": str(box / "cache" / "triton"),
        "JUPYTER_RUNTIME_DIR": str(box / "runtime"),
    }
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    return env


def prepare_box(box: Path, isolation: Isolation, harness: Path) -> None:
    """The kernel's folder and its subfolders, owned by the user the kernel runs as."""
    for sub in ("home", "tmp", "cache", "runtime"):
        (box / sub).mkdir(parents=True, exist_ok=True)
    owner = _box_owner(isolation, harness)
    if owner is not None:
        for path in [box, *box.rglob("*")]:
            os.chown(path, *owner)


def _box_owner(isolation: Isolation, harness: Path) -> tuple[int, int] | None:
    """Who the kernel is outside, where that is not us: nobody (bwrap started as nobody), or
    the grading user."""
    if os.geteuid() != 0:
        return None
    if isolation.level == "bwrap" and bwrap_as_nobody(harness):
        return NOBODY, NOBODY
    if isolation.level == "user":
        return isolation.uid, isolation.gid
    return None


def give_to_kernel(path: Path, isolation: Isolation, harness: Path) -> None:
    """A file the grader wrote for the kernel (its connection file) made readable to it."""
    owner = _box_owner(isolation, harness)
    if owner is not None:
        os.chown(path, *owner)


def bwrap_as_nobody(harness: Path) -> bool:
    """As root, bwrap starts as nobody when nobody can reach everything the kernel reads;
    else (an interpreter under /root) as root, mapped to nobody inside: no capability, and
    of root's files only those in the read-only paths (hence the short list of /etc)."""
    if os.geteuid() != 0:
        return False
    return _nobody_can_read((*_read_only_paths(FULL_HARNESS), str(harness)))


# what of /etc and /sys a kernel needs (the dynamic linker, names, time, the compiler
# alternatives Inductor calls, localhost for lessons 06 and 13; the CPU topology torch reads):
# not all of /etc, whose root-only files (shadow, host keys) a root-mapped sandbox could read
ETC = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "passwd",
    "group",
    "nsswitch.conf",
    "hosts",
    "host.conf",
    "gai.conf",
    "localtime",
    "timezone",
    "alternatives",
    "fonts",
    "mime.types",
    "os-release",
    "debian_version",
    "protocols",
    "services",
    "matplotlibrc",
    "ssl",
    "ca-certificates",
)
SYS_CPU = ("/sys/devices/system/cpu", "/sys/fs/cgroup")
SYS_GPU = ("/sys/devices", "/sys/bus", "/sys/class", "/sys/module")


def _read_only_paths(full_harness: Path) -> list[str]:
    """What the kernel may read: the system's programs and libraries, what it needs of /etc
    and /sys, and the Python environment (the interpreter's prefixes and every existing
    folder on sys.path but the course's own source tree)."""
    paths = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt"]
    paths += [f"/etc/{name}" for name in ETC]
    paths += SYS_GPU if any(Path("/dev").glob("nvidia*")) else SYS_CPU
    python = {sys.base_prefix, sys.prefix, sys.exec_prefix}
    for entry in sys.path:
        if entry and Path(entry).is_dir():
            python.add(str(Path(entry).resolve()))
    repo = full_harness.resolve().parent
    for path in sorted(python):
        if Path(path) == repo or Path(path) in repo.parents:
            continue  # the course's source tree (answers, solutions) stays out; a venv in it may not
        paths.append(path)
    data = Path(os.environ.get("COURSE_DATA", Path.home() / ".cache" / "course_data"))
    if data.is_dir():
        paths.append(str(data))
    return [p for p in dict.fromkeys(paths) if Path(p).exists()]


@functools.cache
def _nobody_can_read(paths: tuple[str, ...]) -> bool:
    """Whether `nobody` can reach every path (an interpreter under /root cannot be)."""
    script = 'for p; do [ -r "$p" ] && { [ ! -d "$p" ] || [ -x "$p" ]; } || exit 1; done'
    cmd = _as_nobody(["sh", "-c", script, "sh", *paths])
    try:
        return subprocess.run(cmd, capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _masks(read_only: list[str], full_harness: Path) -> list[str]:
    """Folders to hide under an empty tmpfs: the full harness where it is installed inside a
    folder the kernel reads (a non-editable install in site-packages)."""
    target = full_harness.resolve()
    return [str(target) for p in read_only if Path(p) in target.parents]


def command(
    kernel_cmd: list[str], box: Path, harness: Path, full_harness: Path, isolation: Isolation
) -> list[str]:
    """The command that starts `kernel_cmd` under `isolation`."""
    if isolation.level == "none":
        return kernel_cmd
    if isolation.level == "user":
        return [
            shutil.which("setpriv") or "setpriv",
            f"--reuid={isolation.uid}",
            f"--regid={isolation.gid}",
            "--clear-groups",
            *kernel_cmd,
        ]
    read_only = _read_only_paths(full_harness)
    cmd = [shutil.which("bwrap") or "bwrap", "--unshare-all", "--die-with-parent", "--new-session"]
    cmd += ["--uid", str(NOBODY), "--gid", str(NOBODY)]
    for path in read_only:
        cmd += ["--ro-bind", path, path]
    for path in _masks(read_only, full_harness):
        cmd += ["--tmpfs", path]
    cmd += ["--ro-bind", str(harness), HARNESS_MOUNT]
    cmd += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/dev/shm"]
    for dev in sorted(Path("/dev").glob("nvidia*")):
        cmd += ["--dev-bind", str(dev), str(dev)]
    cmd += ["--bind", str(box), str(box), "--chdir", str(box)]
    cmd += ["--setenv", "JPY_PARENT_PID", "1", "--"]  # its parent is the sandbox's pid 1
    return _as_nobody(cmd + kernel_cmd) if bwrap_as_nobody(harness) else cmd + kernel_cmd


def exposure(isolation: Isolation, paths: list[Path]) -> list[str]:
    """Of `paths` (solutions, submissions, out), those the kernel could read under `user`
    isolation (bwrap binds none of them): each with why, for the run's log."""
    if isolation.level != "user":
        return []
    import stat

    seen = []
    for path in paths:
        for part in [path, *path.parents]:
            try:
                mode = part.stat().st_mode
            except OSError:
                break
            if part.is_dir() and not mode & stat.S_IXOTH:
                break  # others cannot pass this folder
        else:
            try:
                readable = bool(path.stat().st_mode & stat.S_IROTH)
            except OSError:
                continue
            if readable:
                seen.append(f"{path} is readable by other users (chmod o-rwx to hide it)")
    return seen
