"""Writes the torch.save-format test archives in this directory.

It needs only the Python standard library: a stand-in `torch` module supplies
the globals a real archive names (torch._utils._rebuild_tensor_v2,
torch.FloatStorage, ...), and the same pickling steps as torch.save run on
them (protocol 2, persistent ids ('storage', type, key, 'cpu', numel),
storages under <root>/data/<key>, stored zip entries). Expected values go to
<name>.json beside each archive.

    python3 make_fixtures.py
"""
import collections
import io
import json
import math
import pickle
import struct
import sys
import types
import zipfile

torch = types.ModuleType("torch")
torch_utils = types.ModuleType("torch._utils")
torch_nn = types.ModuleType("torch.nn")
torch_nn_parameter = types.ModuleType("torch.nn.parameter")
sys.modules.update({"torch": torch, "torch._utils": torch_utils, "torch.nn": torch_nn,
                    "torch.nn.parameter": torch_nn_parameter})

FORMATS = {"FloatStorage": ("<f", 4), "BFloat16Storage": (None, 2), "HalfStorage": ("<e", 2),
           "DoubleStorage": ("<d", 8), "LongStorage": ("<q", 8), "IntStorage": ("<i", 4), "BoolStorage": ("<?", 1)}
for _name in FORMATS:
    _cls = type(_name, (), {"__module__": "torch"})
    _cls.__qualname__ = _name
    setattr(torch, _name, _cls)


def _rebuild_tensor_v2(*args):
    raise AssertionError("never called")


def _rebuild_parameter(*args):
    raise AssertionError("never called")


for _f in (_rebuild_tensor_v2, _rebuild_parameter):
    _f.__module__ = "torch._utils"
    setattr(torch_utils, _f.__name__, _f)


def bf16_bits(x):
    b = struct.unpack("<I", struct.pack("<f", x))[0]
    b += 0x7FFF + ((b >> 16) & 1)
    return (b >> 16) & 0xFFFF


def bf16_value(x):
    return struct.unpack("<f", struct.pack("<I", bf16_bits(x) << 16))[0]


class Storage:
    def __init__(self, kind, values):
        self.kind, self.values = kind, list(values)

    def to_bytes(self):
        fmt, _ = FORMATS[self.kind]
        if fmt is None:
            return b"".join(struct.pack("<H", bf16_bits(v)) for v in self.values)
        return b"".join(struct.pack(fmt, v) for v in self.values)


class Tensor:
    def __init__(self, storage, offset, size, stride, parameter=False):
        self.storage, self.offset, self.size, self.stride = storage, offset, tuple(size), tuple(stride)
        self.parameter = parameter

    def __reduce_ex__(self, proto):
        t = (_rebuild_tensor_v2, (self.storage, self.offset, self.size, self.stride, False, collections.OrderedDict()))
        if self.parameter:
            return (_rebuild_parameter, (Tensor(self.storage, self.offset, self.size, self.stride), True,
                                         collections.OrderedDict()))
        return t

    def values(self):
        """Row-major element values, following the strides (floats as stored)."""
        out = []

        def rec(dim, pos):
            if dim == len(self.size):
                v = self.storage.values[pos]
                if self.storage.kind == "BFloat16Storage":
                    v = bf16_value(v)
                elif self.storage.kind == "HalfStorage":
                    v = struct.unpack("<e", struct.pack("<e", v))[0]
                out.append(v)
                return
            for i in range(self.size[dim]):
                rec(dim + 1, pos + i * self.stride[dim])

        rec(0, self.offset)
        return out


def contiguous(kind, shape, values):
    stride, s = [], 1
    for n in reversed(shape):
        stride.insert(0, s)
        s *= n
    return Tensor(Storage(kind, values), 0, shape, stride)


def lattice(n, a, b):
    """Deterministic, non-trivial values: no zeros, no ones, mixed signs."""
    return [round(math.sin(a * i + b) * 1.7 + 0.01 * (i % 7) - 0.02, 6) for i in range(n)]


def save(path, obj, protocol=2):
    storages = {}

    class Pickler(pickle.Pickler):
        def persistent_id(self, o):
            if isinstance(o, Storage):
                key = storages.setdefault(id(o), (str(len(storages)), o))[0]
                return ("storage", getattr(torch, o.kind), key, "cpu", len(o.values))
            return None

    buf = io.BytesIO()
    Pickler(buf, protocol=protocol).dump(obj)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", buf.getvalue())
        z.writestr("archive/.format_version", "1")
        z.writestr("archive/.storage_alignment", "64")
        z.writestr("archive/byteorder", "little")
        for key, st in sorted(storages.values()):
            z.writestr("archive/data/" + key, st.to_bytes())
        z.writestr("archive/version", "3\n")
        z.writestr("archive/.data/serialization_id", "0123456789")


def head_fixture():
    d, dp = 6, 4
    sd = collections.OrderedDict()
    sd["q.weight"] = contiguous("FloatStorage", [dp, d], lattice(dp * d, 0.37, 0.1))
    sd["q.bias"] = contiguous("FloatStorage", [dp], lattice(dp, 0.91, 0.2))
    sd["k.weight"] = contiguous("FloatStorage", [dp, d], lattice(dp * d, 0.53, 0.3))
    sd["k.bias"] = contiguous("FloatStorage", [dp], lattice(dp, 1.13, 0.4))
    sd._metadata = collections.OrderedDict([("", {"version": 1}), ("q", {"version": 1}), ("k", {"version": 1})])
    args = {"run": "runs/tiny", "lr": 0.0002, "epochs": 3, "lora": 16, "bf16": True, "seed": None,
            "targets": ["q_proj", "k_proj"], "shape": (2, 3), "big": 2 ** 70, "neg": -300000}
    meta = {"args": args, "suite_sha256": "ab" * 32, "base": "Qwen/Qwen3.5-0.8B-Base", "head": sd,
            "base_revision": "dc7cdfe2ee4154fa7e30f5b51ca41bfa40174e68", "lora": 16, "head_dim": dp,
            "option_isolation": False, "special_embeddings": False, "weights_dtype": "fp32",
            "temperature": 2.41, "holdout": ["a", "b"], "weights": "lora"}
    save("head.pt", meta)
    expect = {"keys": list(meta), "head": {k: {"shape": list(v.size), "values": v.values()} for k, v in sd.items()},
              "temperature": 2.41, "big": str(2 ** 70)}
    with open("head.json", "w") as f:
        json.dump(expect, f, indent=1)


def views_fixture(name, protocol):
    base = Storage("FloatStorage", lattice(24, 0.29, 0.7))
    full = Tensor(base, 0, [4, 6], [6, 1])
    transposed = Tensor(base, 0, [6, 4], [1, 6])
    sliced = Tensor(base, 7, [2, 3], [6, 2])
    scalar = Tensor(base, 5, [], [])
    bf = contiguous("BFloat16Storage", [3, 2], lattice(6, 0.61, 0.9))
    hf = contiguous("HalfStorage", [5], [0.5, -1.25, 3.0, 1.0 / 3, 65504.0])
    f64 = contiguous("DoubleStorage", [2], [1.0 / 3, -2.5e-3])
    i64 = contiguous("LongStorage", [3], [1, -2, 2 ** 40])
    param = Tensor(Storage("FloatStorage", lattice(3, 0.77, 0.1)), 0, [3], [1], parameter=True)
    obj = [full, transposed, sliced, scalar, bf, hf, f64, i64, param, b"\x00\xffraw", (1, "two", 3.5), 2 ** 64]
    save(name + ".pt", obj, protocol)
    expect = {"float": [t.values() for t in (full, transposed, sliced, scalar, bf, hf, f64, param)],
              "shapes": [list(t.size) for t in (full, transposed, sliced, scalar, bf, hf, f64, i64, param)]}
    with open(name + ".json", "w") as f:
        json.dump(expect, f, indent=1)


class Evil:
    def __reduce__(self):
        import os
        return (os.system, ("echo should-never-run",))


if __name__ == "__main__":
    head_fixture()
    views_fixture("views", 2)
    views_fixture("views_p4", 4)
    save("evil.pt", {"x": Evil()})
