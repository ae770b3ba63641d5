#!/usr/bin/env python3
"""Writes Fashion-MNIST as sparse pixel tokens for examples/fashion-mnist-tokens.json.

Each non-zero pixel p (0..783) of an image becomes one id: 2p for a light pixel (1..127),
2p + 1 for a dark one (128..255), with weight 1; blank pixels give no id. The files are
gzipped LIBSVM (`label id:1 id:1 ...`, ids from 0, so data.index_base 0), one line per
image: OUT/train.tokens.gz (60000 images) and OUT/test.tokens.gz (10000). The model reads
them with one embedding of 1568 rows (784 pixels x 2 levels) and max_ids 784.

usage: scripts/fashion-mnist-tokens.py OUT_DIR [IDX_DIR]
IDX_DIR defaults to /usr/share/datasets/fashion-mnist (apt-get install dataset-fashion-mnist).
"""
import gzip
import itertools
import os
import struct
import sys

FILES = (("train", "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
         ("test", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"))


def main(argv):
    if len(argv) not in (2, 3) or argv[1] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr if len(argv) not in (2, 3) else sys.stdout)
        return 64 if len(argv) not in (2, 3) else 0
    out = argv[1]
    src = argv[2] if len(argv) == 3 else "/usr/share/datasets/fashion-mnist"
    os.makedirs(out, exist_ok=True)
    for name, images, labels in FILES:
        try:
            with gzip.open(os.path.join(src, images)) as f:
                magic, n, rows, cols = struct.unpack(">IIII", f.read(16))
                pixels = f.read(n * rows * cols)
            with gzip.open(os.path.join(src, labels)) as f:
                f.read(8)
                label = f.read(n)
        except OSError as e:
            print("fashion-mnist-tokens: %s" % e, file=sys.stderr)
            return 66
        if magic != 0x803 or rows * cols != 784 or len(pixels) != n * 784 or len(label) != n:
            print("fashion-mnist-tokens: %s is not a Fashion-MNIST image file" % images,
                  file=sys.stderr)
            return 65
        path = os.path.join(out, "%s.tokens.gz" % name)
        # Per image, in C loops: a selector over the 1568 ids, byte 2p set for a light pixel
        # p and 2p + 1 for a dark one, picks the ids' "id:1" tokens in order.
        light = bytes(1 if 0 < v <= 127 else 0 for v in range(256))
        dark = bytes(1 if v > 127 else 0 for v in range(256))
        tokens = ["%d:1" % t for t in range(1568)]
        pick = bytearray(1568)
        with gzip.open(path + ".tmp", "wt", compresslevel=1) as f:
            for i in range(n):
                p = pixels[i * 784:(i + 1) * 784]
                pick[0::2] = p.translate(light)
                pick[1::2] = p.translate(dark)
                f.write("%d %s\n" % (label[i], " ".join(itertools.compress(tokens, pick))))
        os.replace(path + ".tmp", path)
        print("wrote %s (%d images)" % (path, n))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
