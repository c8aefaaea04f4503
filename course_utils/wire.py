"""What crosses from the learner's code to the judge: plain data, never an object.

A check's verdict is decided by code the learner cannot reach (course_utils.probes), so what
the learner's code returns must reach it as data that runs nothing when it is read: numbers,
strings, lists, dicts and tensors. `encode` turns a value into a JSON header and a blob of
tensors (torch.save); `decode` reads them back with `json.loads` and `torch.load(...,
weights_only=True)`, which build only plain containers and tensors. A value of any other
type arrives as a `Record` (its type name and fields) or an `Opaque` (its type name only).

Both sides of a check go through this, in the learner's own kernel too (`normalise`), so a
check sees the same values whether it runs beside the learner's code or in the judge: a
float subclass whose `__eq__` calls an answer, say, arrives as a plain float.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import struct
from typing import Any

MAX_HEADER = 64 * 2**20  # bytes of JSON in one message: a value's structure, not its tensors
MAX_BLOB = 2 * 2**30  # bytes of tensors in one message
MAX_DEPTH = 64  # nesting of containers: deeper is refused (a reader must not recurse forever)


class WireError(ValueError):
    """Raised when a message is not plain data of the shape this module writes."""


@dataclasses.dataclass(frozen=True)
class Record:
    """An object of the learner's (a dataclass, a namedtuple, an object with attributes) as
    its type name and its fields, each decoded in turn; read fields as attributes."""

    type_name: str
    fields: dict[str, Any]

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["fields"][name]
        except KeyError:
            raise AttributeError(f"{self.__dict__['type_name']} has no field {name!r}") from None


@dataclasses.dataclass(frozen=True)
class Opaque:
    """A value of a type that does not cross (a function, a module, an open file): its type
    name and a short description, so a message can say what came back."""

    type_name: str
    text: str = ""


# --- the learner's side: any value -> (header, tensors) --------------------------------------


def _plain_number(value: Any) -> Any:
    """A bool, int or float as its exact built-in type, read without calling the value's own
    methods (a subclass may override __float__ or __eq__)."""
    if isinstance(value, bool):
        return bool.__bool__(value) if type(value) is not bool else value
    if isinstance(value, int):
        return int.__int__(value)
    return float.__float__(value)


def _fields(value: Any, *, objects: bool = True) -> dict[str, Any] | None:
    """A record's fields, or None: a dataclass, a namedtuple, or (with `objects`) an object's
    own public attributes."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, tuple) and hasattr(type(value), "_fields"):
        return dict(zip(type(value)._fields, value, strict=False))
    attrs = getattr(value, "__dict__", None) if objects else None
    if isinstance(attrs, dict) and not callable(value):
        return {k: v for k, v in attrs.items() if isinstance(k, str) and not k.startswith("_")}
    return None


class _Encoder:
    def __init__(self) -> None:
        self.tensors: list = []

    def tensor(self, value) -> int:
        self.tensors.append(value.detach().cpu().clone().contiguous())
        return len(self.tensors) - 1

    def __call__(self, value: Any, depth: int = 0, in_object: bool = False) -> Any:
        """`in_object`: inside a plain object's attributes, where another plain object is
        described, not followed (an object graph can be deep, or a cycle)."""
        if depth >= MAX_DEPTH:
            return {"$opaque": type(value).__qualname__, "text": "nested too deep to send"}
        if value is None or type(value) is str:
            return value
        if isinstance(value, bool | int | float):
            number = _plain_number(value)
            if isinstance(number, float) and not math.isfinite(number):
                return {"$float": repr(number)}
            return number
        if isinstance(value, str):
            return str.__str__(value)
        import numpy as np
        import torch

        if isinstance(value, torch.Tensor):
            return {"$tensor": self.tensor(value), "device": str(value.device)}
        if isinstance(value, np.generic):
            return self(value.item(), depth + 1)
        if isinstance(value, np.ndarray):
            if value.dtype == object:
                return {"$list": [self(v, depth + 1) for v in value.tolist()]}
            return {"$ndarray": self.tensor(torch.from_numpy(np.ascontiguousarray(value)))}
        if isinstance(value, torch.dtype):
            return {"$dtype": str(value).removeprefix("torch.")}
        if isinstance(value, torch.device):
            return {"$device": str(value)}
        if isinstance(value, torch.Size):
            return {"$tuple": [int(v) for v in value]}
        down = depth + 1
        if isinstance(value, dict):
            pairs = [[self(k, down, in_object), self(v, down, in_object)] for k, v in value.items()]
            return {"$dict": pairs}
        fields = _fields(value) if isinstance(value, tuple) else None
        if isinstance(value, list | tuple | set | frozenset) and fields is None:
            tag = "$tuple" if isinstance(value, tuple) else "$list"
            return {tag: [self(v, down, in_object) for v in value]}
        if fields is None:
            fields = _fields(value, objects=not in_object)
        name = type(value).__qualname__
        if fields is not None:
            plain = not (dataclasses.is_dataclass(value) or isinstance(value, tuple))
            inner = {k: self(v, down, in_object or plain) for k, v in fields.items()}
            return {"$record": name, "fields": inner}
        return {"$opaque": name, "text": _describe(value)}


def _describe(value: Any) -> str:
    try:
        return object.__repr__(value)[:200]
    except Exception:  # a broken object must not stop the check
        return ""


def encode(value: Any) -> tuple[bytes, bytes]:
    """(JSON header, torch.save blob of the tensors it refers to) for any value."""
    encoder = _Encoder()
    header = json.dumps(encoder(value)).encode("utf-8")
    if not encoder.tensors:
        return header, b""
    import torch

    buffer = io.BytesIO()
    torch.save(encoder.tensors, buffer)
    return header, buffer.getvalue()


# --- the judge's side: (header, tensors) -> plain data ----------------------------------------


class _Decoder:
    def __init__(self, tensors: list) -> None:
        self.tensors = tensors

    def tensor(self, index: Any):
        if not isinstance(index, int) or not 0 <= index < len(self.tensors):
            raise WireError(f"a tensor reference out of range: {index!r}")
        return self.tensors[index]

    def __call__(self, node: Any, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            raise WireError(f"a value nested over {MAX_DEPTH} deep")
        if node is None or isinstance(node, bool | int | float | str):
            return node
        if isinstance(node, list):
            raise WireError("a bare JSON list: containers are tagged")
        if not isinstance(node, dict) or len(node) not in (1, 2):
            raise WireError(f"not a tagged value: {type(node).__name__}")
        tag = next(iter(node))
        body = node[tag]
        if tag == "$float" and body in ("inf", "-inf", "nan"):
            return float(body)
        if tag in ("$list", "$tuple") and isinstance(body, list):
            items = [self(v, depth + 1) for v in body]
            return items if tag == "$list" else tuple(items)
        if tag == "$dict" and isinstance(body, list):
            out = {}
            for pair in body:
                if not (isinstance(pair, list) and len(pair) == 2):
                    raise WireError("a dict entry that is not a pair")
                key = self(pair[0], depth + 1)
                try:
                    out[key] = self(pair[1], depth + 1)
                except TypeError as exc:  # an unhashable key
                    raise WireError(f"a dict key that cannot be a key: {exc}") from None
            return out
        if tag == "$tensor":
            return self._on_device(self.tensor(body), node.get("device"))
        if tag == "$ndarray":
            return self.tensor(body).numpy()
        if tag == "$dtype" and isinstance(body, str):
            import torch

            dtype = getattr(torch, body, None)
            if not isinstance(dtype, torch.dtype):
                raise WireError(f"not a dtype: {body!r}")
            return dtype
        if tag == "$device" and isinstance(body, str):
            import torch

            try:
                return torch.device(body)
            except RuntimeError as exc:
                raise WireError(str(exc)) from None
        if tag == "$record" and isinstance(body, str) and isinstance(node.get("fields"), dict):
            fields = {str(k): self(v, depth + 1) for k, v in node["fields"].items()}
            return Record(body, fields)
        if tag == "$opaque" and isinstance(body, str):
            return Opaque(body, str(node.get("text", ""))[:200])
        raise WireError(f"an unknown tag {tag!r}")

    @staticmethod
    def _on_device(tensor, device: Any):
        """Back on the device it came from, where this process has it (the judge shares the
        learner's device); else on the CPU."""
        if not isinstance(device, str) or device == "cpu":
            return tensor
        import torch

        try:
            return tensor.to(torch.device(device))
        except (RuntimeError, AssertionError):  # no such device here
            return tensor


def decode(header: bytes, blob: bytes = b"") -> Any:
    """The plain value `encode` wrote; raises WireError for anything else. Runs no code of
    the sender's: JSON, and tensors through torch.load's weights-only unpickler."""
    if len(header) > MAX_HEADER or len(blob) > MAX_BLOB:
        raise WireError(f"a message of {len(header) + len(blob):,} bytes, over the limit")
    try:
        tree = json.loads(header.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise WireError(f"not JSON: {exc}") from None
    tensors: list = []
    if blob:
        import torch

        try:
            tensors = torch.load(io.BytesIO(blob), weights_only=True, map_location="cpu")
        except Exception as exc:  # the weights-only unpickler refuses anything but tensors
            raise WireError(f"not a tensor blob: {type(exc).__name__}: {exc}") from None
        if not isinstance(tensors, list) or not all(isinstance(t, torch.Tensor) for t in tensors):
            raise WireError("the blob holds something other than a list of tensors")
    return _Decoder(tensors)(tree)


def normalise(value: Any) -> Any:
    """`value` as the judge would receive it (see the module docstring)."""
    return decode(*encode(value))


# --- framing on a stream socket ----------------------------------------------------------------

_LENGTHS = struct.Struct("!QQ")


def send(sock, message: dict, value: Any = None, *, with_value: bool = False) -> None:
    """One message: a JSON control dict, and optionally a value (encoded as above)."""
    header, blob = encode(value) if with_value else (b"", b"")
    send_encoded(sock, message, header, blob, with_value=with_value)


def send_encoded(
    sock, message: dict, header: bytes, blob: bytes, *, with_value: bool = True
) -> None:
    """`send` of a value already encoded."""
    control = json.dumps({**message, "has_value": with_value}).encode("utf-8")
    sock.sendall(_LENGTHS.pack(len(control), len(header)) + control + header)
    sock.sendall(struct.pack("!Q", len(blob)) + blob)


def _read_exactly(sock, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise EOFError("the other side closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive(sock, *, decode_value: bool = True) -> tuple[dict, Any]:
    """The next message: (control dict, its value or None). Size limits apply before a byte
    of the body is read."""
    control_len, header_len = _LENGTHS.unpack(_read_exactly(sock, _LENGTHS.size))
    if control_len > MAX_HEADER or header_len > MAX_HEADER:
        raise WireError("a message header over the limit")
    try:
        control = json.loads(_read_exactly(sock, control_len).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise WireError(f"a control message that is not JSON: {exc}") from None
    header = _read_exactly(sock, header_len)
    (blob_len,) = struct.unpack("!Q", _read_exactly(sock, 8))
    if blob_len > MAX_BLOB:
        raise WireError("a tensor blob over the limit")
    blob = _read_exactly(sock, blob_len)
    if not isinstance(control, dict):
        raise WireError("a control message that is not an object")
    value = decode(header, blob) if control.get("has_value") and decode_value else None
    return control, value
