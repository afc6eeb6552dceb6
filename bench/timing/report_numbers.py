# The numbers of a kiln-eval report (median us of candidate and reference, speedup and its interval),
# read with a small MessagePack reader (--json: with the start phases, as JSON),: the GPU host has Python but not the msgpack module.
import struct, sys
b = open(sys.argv[1], "rb").read()
def rd(i):
    t = b[i]
    if t <= 0x7f: return t, i + 1
    if t >= 0xe0: return t - 256, i + 1
    if 0x80 <= t <= 0x8f: return rmap(t & 15, i + 1)
    if 0x90 <= t <= 0x9f: return rarr(t & 15, i + 1)
    if 0xa0 <= t <= 0xbf: n = t & 31; return b[i + 1:i + 1 + n].decode(), i + 1 + n
    if t == 0xc0: return None, i + 1
    if t in (0xc2, 0xc3): return t == 0xc3, i + 1
    fmt = {0xca: ">f", 0xcb: ">d", 0xcc: ">B", 0xcd: ">H", 0xce: ">I", 0xcf: ">Q", 0xd0: ">b", 0xd1: ">h", 0xd2: ">i", 0xd3: ">q"}
    if t in fmt: n = struct.calcsize(fmt[t]); return struct.unpack(fmt[t], b[i + 1:i + 1 + n])[0], i + 1 + n
    if t in (0xd9, 0xda, 0xdb, 0xc4, 0xc5, 0xc6):
        w = {0xd9: 1, 0xc4: 1, 0xda: 2, 0xc5: 2, 0xdb: 4, 0xc6: 4}[t]
        n = int.from_bytes(b[i + 1:i + 1 + w], "big"); s = b[i + 1 + w:i + 1 + w + n]
        return (s.decode() if t >= 0xd9 else s), i + 1 + w + n
    if t in (0xdc, 0xdd): w = 2 if t == 0xdc else 4; return rarr(int.from_bytes(b[i + 1:i + 1 + w], "big"), i + 1 + w)
    if t in (0xde, 0xdf): w = 2 if t == 0xde else 4; return rmap(int.from_bytes(b[i + 1:i + 1 + w], "big"), i + 1 + w)
    raise ValueError(hex(t))
def rarr(n, i):
    out = []
    for _ in range(n): v, i = rd(i); out.append(v)
    return out, i
def rmap(n, i):
    out = {}
    for _ in range(n): k, i = rd(i); v, i = rd(i); out[k] = v
    return out, i
r, _ = rd(0)
if "--json" in sys.argv:  # the verdict, the first case's medians and the evaluation's start phases, as JSON
    import json
    c = (r.get("performance", {}).get("cases") or [{}])[0]
    meta = {k: float(v) for k, v in r.get("metadata", {}).items() if k.startswith("eval_start") or k == "eval_teardown_s"}
    print(json.dumps({"status": r.get("status"), "candidate_us": c.get("candidate", {}).get("median_us"),
                      "reference_us": c.get("reference", {}).get("median_us"), "speedup": c.get("speedup"), **meta}))
    sys.exit(0)
c = r["performance"]["cases"][0]
print(c["candidate"]["median_us"], c["reference"]["median_us"], c["speedup"], c["speedup_lo"], c["speedup_hi"])
