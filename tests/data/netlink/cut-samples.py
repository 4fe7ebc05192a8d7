#!/usr/bin/python3
"""cut-samples.py IN OUT [N...]: copy whole samples of a sockwatch record (-r), byte for byte,
into a smaller file: with N given, samples N... (0-based); without, each sample whose socket
lines differ from the previous sample's in anything but their tcp_info and skmem (a socket new
or gone, its ULP attribute changed), with the sample before each such change.  How
ktls*-6.1.bin were cut from p08-tls-handshake's ktls*-sockwatch.bin of a 6.1 guest."""
import struct
import sys

NLMSG_NOOP, SOCK_DIAG_BY_FAMILY = 1, 20
INET_DIAG_ULP_INFO = 19


def samples(data):
    out, cur, off = [], b"", 0
    while off < len(data):
        length, mtype = struct.unpack_from("=IH", data, off)
        if length < 16 or off + length > len(data):
            sys.exit(f"cut-samples.py: garbled record at byte {off}")
        cur += data[off:off + ((length + 3) & ~3)]
        off += (length + 3) & ~3
        if mtype == NLMSG_NOOP:
            out.append(cur)
            cur = b""
    return out


def key(sample):
    """What marks a sample: per socket message, its cookie and its ULP attribute's bytes."""
    keys, off = [], 0
    while off < len(sample):
        length, mtype = struct.unpack_from("=IH", sample, off)
        if mtype == SOCK_DIAG_BY_FAMILY:
            cookie = sample[off + 16 + 4 + 40:off + 16 + 4 + 48]
            a, ulp = off + 16 + 72, b""
            while a + 4 <= off + length:
                alen, atype = struct.unpack_from("=HH", sample, a)
                if alen < 4:
                    break
                if atype & 0x3fff == INET_DIAG_ULP_INFO:
                    ulp = sample[a:a + alen]
                a += (alen + 3) & ~3
            keys.append((cookie, ulp))
        off += (length + 3) & ~3
    return keys


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: cut-samples.py IN OUT [N...]")
    with open(sys.argv[1], "rb") as f:
        ss = samples(f.read())
    if len(sys.argv) > 3:
        keep = sorted({int(n) for n in sys.argv[3:]})
    else:
        keep = {0}
        for i in range(1, len(ss)):
            if key(ss[i]) != key(ss[i - 1]):
                keep |= {i - 1, i}
        keep = sorted(keep)
    with open(sys.argv[2], "wb") as f:
        f.write(b"".join(ss[i] for i in keep))
    print(f"{len(keep)} of {len(ss)} samples: {' '.join(map(str, keep))}")


if __name__ == "__main__":
    main()
