"""Writes cpython.json: what CPython prints for float repr, round(x, n), json.loads and json.dumps, to check
package pyjson against. Run from this directory with CPython 3.11 or later: python3 gen_cpython.py"""
import json, math, random, struct, sys

rng = random.Random(20261130)


def bits(x):
    return struct.pack(">d", x).hex()


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


floats = [0.0, -0.0, 1.0, -1.0, 0.1, 0.2, 0.7, 1.5, 100.0, 1e16, 1e15, 9999999999999998.0, 123456789012345678.0,
          0.0001, 0.00001, 1e-7, 1e21, 1e22, 1.5e-5, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308,
          0.30000000000000004, 1 / 3, 2 / 3, 2.675, 0.125, 0.5, 2.5, 1e100, 123.456, 0.2088, 1e-4, 9.999e-5,
          float("inf"), float("-inf")]
floats += [10.0 ** e for e in range(-30, 30)]
floats += [1.5 * 10.0 ** e for e in range(-30, 30)]
floats += [struct.unpack(">d", rng.getrandbits(64).to_bytes(8, "big"))[0] for _ in range(400)]
floats += [rng.random() for _ in range(300)]
floats += [f32(rng.random()) for _ in range(600)]
floats += [f32(rng.random() * 1e-3) for _ in range(200)]
floats += [rng.uniform(-1e6, 1e6) for _ in range(100)]
floats += [k / 20000 for k in range(0, 20001, 7)]          # near 4-dp ties
floats += [k / 200 for k in range(0, 201)]                   # near 2-dp ties
floats = [x for x in floats if not math.isnan(x)]

reprs = [[bits(x), repr(x)] for x in floats]
rounds = []
for x in floats:
    for n in (0, 1, 2, 4, 6):
        rounds.append([bits(x), n, bits(round(x, n))])
for x in [1234.5678, 15.0, 25.0, 35.0, 149.99, -250.0, 5e20, 0.4, -0.6, 12345678901.0]:
    for n in (-1, -2, -3):
        rounds.append([bits(x), n, bits(round(x, n))])

docs = [
    '{"a": 1, "b": 2.0, "c": [true, false, null], "d": "x"}', '{"a": 1, "a": 2, "b": 3, "a": 4}', '1.50', '1e2',
    '-0', '-0.0', '12345678901234567890123456789', '1E400', '-1e400', '1e-400', 'NaN', 'Infinity', '-Infinity',
    '"\\u00e9\\ud83d\\ude00"', '"\\ud800"', '"\\udc00x"', '"\\ud800\\u0041"', '"a\\/b\\\\c\\"d\\b\\f\\n\\r\\t"',
    ' \t\r\n[1, 2 ] \n', '"héllo 世界 😀"', '{}', '[]', '[[], {}]', '0', '0.5e-3', '123.456E+7',
    '', ' ', '{', '[', '[1,]', '{"a":1,}', '{"a" 1}', '{"a":1 "b":2}', '[1 2]', '{1: 2}', "{'a': 1}",
    '"abc', '"a\\', '"a\nb"', '"\\x"', '"\\u12"', '"\\u12g4"', '01', '1.', '.5', '-', '-a', '1e', '1e+', 'nul', 'tru',
    '[1] x', 'infinity', '+1', '"\\ud800\\u12"', '\u00e9', '["\u00e9", "\\x"]', '{"\u00e9": 1, "b":}',
    '"\x7f"', '"tab\there"', '1 2',
]
loads = []
for d in docs:
    try:
        v = json.loads(d.encode("utf-8"))
        loads.append({"in": d, "ok": True, "dumps": json.dumps(v), "compact": json.dumps(v, ensure_ascii=False, separators=(",", ":"), allow_nan=True)})
    except json.JSONDecodeError as e:
        loads.append({"in": d, "ok": False, "msg": e.msg, "pos": e.pos, "str": str(e)})

strs = ["plain", "é", "日本語", "😀", "a\"b\\c", "\x00\x01\x1f\x7f", "line\nbreak\ttab\r\b\f", "\u2028\u2029", "/"]
dumps = [[s, json.dumps(s), json.dumps(s, ensure_ascii=False, separators=(",", ":"))] for s in strs]

json.dump({"python": sys.version.split()[0], "repr": reprs, "round": rounds, "loads": loads, "dumps": dumps},
          open("cpython.json", "w"), ensure_ascii=True)
