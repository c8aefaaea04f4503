"""course_utils.wire: what a probe returns reaches the judge as plain data, and reading it runs
nothing the learner's code chose."""

from __future__ import annotations

import io
import math
import pickle
import socket
from collections import namedtuple
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from course_utils import wire
from course_utils.wire import Opaque, Record, WireError, decode, encode, normalise


@pytest.mark.parametrize(
    "value",
    [None, True, 3, -2.5, "text", [1, "a", None], (1, (2, 3)), {"a": [1, 2]}, {3: "int key"}],
    ids=repr,
)
def test_plain_values_cross_unchanged_with_their_container_types(value):
    got = normalise(value)
    assert got == value and type(got) is type(value)


def test_infinities_and_nan_cross_as_floats():
    got = normalise([math.inf, -math.inf, math.nan])
    assert got[:2] == [math.inf, -math.inf] and math.isnan(got[2])


def test_tensors_cross_with_their_values_dtype_and_shape():
    x = torch.arange(6, dtype=torch.float16).reshape(2, 3)
    got = normalise({"x": x, "grad": x.requires_grad_(False) * 2})
    assert torch.equal(got["x"], x) and got["x"].dtype == torch.float16
    assert not got["x"].requires_grad


def test_numpy_values_cross_as_numpy_and_python_numbers():
    got = normalise({"a": np.arange(4, dtype=np.int32), "s": np.float64(0.5), "i": np.int64(7)})
    assert isinstance(got["a"], np.ndarray) and got["a"].tolist() == [0, 1, 2, 3]
    assert type(got["s"]) is float and type(got["i"]) is int


def test_dtypes_devices_and_sizes_cross():
    got = normalise([torch.bfloat16, torch.device("cpu"), torch.Size([2, 3])])
    assert got == [torch.bfloat16, torch.device("cpu"), (2, 3)]


def test_subclasses_of_numbers_and_strings_arrive_as_the_built_in_value():
    class Liar(float):
        def __float__(self):
            return 1e9

        def __eq__(self, other):
            return True

        __hash__ = float.__hash__

    class Shouting(str):
        pass

    got = normalise([Liar(0.25), Shouting("x"), True])
    assert got == [0.25, "x", True]
    assert [type(v) for v in got] == [float, str, bool]


@dataclass
class TrainLog:
    losses: list
    val_accuracy: list


def test_a_dataclass_arrives_as_a_record_read_by_attribute():
    got = normalise(TrainLog([1.0, 0.5], [0.9]))
    assert isinstance(got, Record) and got.type_name == "TrainLog"
    assert got.losses == [1.0, 0.5] and got.val_accuracy == [0.9]
    with pytest.raises(AttributeError):
        got.missing  # noqa: B018


def test_a_namedtuple_arrives_as_a_record():
    Point = namedtuple("Point", "x y")
    got = normalise(Point(1, 2))
    assert got.type_name == "Point" and (got.x, got.y) == (1, 2)


def test_an_object_keeps_its_public_attributes_and_nested_objects_become_opaque():
    class Row:
        def __init__(self):
            self.key, self.count, self._private = "aten::mm", 3, "hidden"
            self.inner = Row.__new__(Row)
            self.inner.__dict__["loop"] = self  # a cycle, as profiler objects have

    got = normalise(Row())
    assert got.type_name.endswith("Row") and got.key == "aten::mm" and got.count == 3
    assert "_private" not in got.fields
    assert isinstance(got.inner, Opaque)


def test_functions_and_modules_arrive_opaque():
    got = normalise([len, torch.nn.Linear(2, 2)])
    assert all(isinstance(v, Opaque) for v in got)
    assert got[1].type_name == "Linear"


def test_a_value_nested_deeper_than_the_limit_is_cut_not_refused():
    deep: list = []
    node = deep
    for _ in range(wire.MAX_DEPTH + 10):
        node.append([])
        node = node[0]
    got = normalise(deep)
    for _ in range(wire.MAX_DEPTH):
        got = got[0]
    assert isinstance(got, Opaque)


# --- reading runs no code of the sender's -------------------------------------------------


class Explosive:
    def __reduce__(self):
        return (print, ("this must never run",))


def test_a_blob_holding_anything_but_tensors_is_refused_without_running_it(capsys):
    buffer = io.BytesIO()
    torch.save([Explosive()], buffer)
    with pytest.raises(WireError):
        decode(b'{"$tensor": 0}', buffer.getvalue())
    assert "must never run" not in capsys.readouterr().out


def test_a_plain_pickle_is_not_a_blob(capsys):
    with pytest.raises(WireError):
        decode(b'{"$tensor": 0}', pickle.dumps([Explosive()]))
    assert "must never run" not in capsys.readouterr().out


@pytest.mark.parametrize(
    "header",
    [b"[1, 2]", b'{"$tensor": 5}', b'{"$unknown": 1}', b'{"$dtype": "os.system"}', b"not json"],
)
def test_malformed_headers_are_refused(header):
    with pytest.raises(WireError):
        decode(header)


def test_an_oversized_message_is_refused_before_it_is_read(monkeypatch):
    monkeypatch.setattr(wire, "MAX_HEADER", 10)
    header, blob = encode(list(range(100)))
    with pytest.raises(WireError):
        decode(header, blob)


# --- framing --------------------------------------------------------------------------------


def test_a_message_and_its_value_cross_a_socket():
    left, right = socket.socketpair()
    with left, right:
        wire.send(left, {"probe": "x"}, {"w": torch.ones(3)}, with_value=True)
        control, value = wire.receive(right)
    assert control["probe"] == "x" and torch.equal(value["w"], torch.ones(3))


def test_a_connection_closed_mid_message_is_an_eof():
    left, right = socket.socketpair()
    with right:
        header, _ = encode([1, 2, 3])
        left.sendall(wire._LENGTHS.pack(100, len(header)) + b'{"partial":')
        left.close()
        with pytest.raises(EOFError):
            wire.receive(right)
