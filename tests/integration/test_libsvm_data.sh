#!/usr/bin/env bash
# labels: sanitizer-only
# timeout: 300
# data.format "libsvm": `psflow train` on Fashion-MNIST written as a gzipped LIBSVM file
# (the first 12000 training and 2000 test examples, only the non-zero pixels, ids from 1)
# against the same numbers written as CSV: the same data set, so the same training to the
# last digit (loss and test accuracy lines identical), and the softmax model learns
# (accuracy >= 0.78 after 1500 steps; a sanitizer build trains 300 steps, evaluating every
# 100, which reach the same bound, and says so). Then the same file read with index_base 0
# (its id 784 is past inputs 0 .. 783) and a file with decreasing ids are refused with exit
# 65, naming the file, the line and the rule.
source "$(dirname "$0")/lib.sh"

STEPS=1500 EVERY=500
if sanitized_build; then
  STEPS=300 EVERY=100
  echo "sanitizer build: $STEPS steps, an evaluation every $EVERY"
fi

python3 - "$WORK" <<'PY'
import gzip, struct, sys
work = sys.argv[1]
base = "/usr/share/datasets/fashion-mnist/"
def load(images, labels, n):
    with gzip.open(base + images) as f:
        _, count, rows, cols = struct.unpack(">IIII", f.read(16))
        px = f.read(n * rows * cols)
    with gzip.open(base + labels) as f:
        f.read(8)
        lab = f.read(n)
    return [(lab[i], px[i * 784:(i + 1) * 784]) for i in range(n)]
# Each pixel value's text, formatted once; the gzip level only sets the compression.
text = ["%.6g" % (v / 255) for v in range(256)]
for name, images, labels, n in (("train", "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", 12000),
                                ("test", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", 2000)):
    ex = load(images, labels, n)
    with gzip.open("%s/%s.libsvm.gz" % (work, name), "wt", compresslevel=1) as f:
        f.write("# Fashion-MNIST %s, first %d examples: label id:pixel/255, ids 1..784\n" % (name, n))
        for y, p in ex:
            f.write("%d %s\n" % (y, " ".join("%d:%s" % (j + 1, text[v]) for j, v in enumerate(p) if v)))
    with open("%s/%s.csv" % (work, name), "w") as f:
        for y, p in ex:
            f.write("%d,%s\n" % (y, ",".join([text[v] for v in p])))
PY

spec() { # FORMAT TRAIN TEST [INDEX_BASE]
  STEPS=$STEPS EVERY=$EVERY python3 - "$PSFLOW_SRC/examples/fashion-mnist-softmax.json" "$@" <<'PY'
import json, os, sys
d = json.load(open(sys.argv[1]))
fmt, train, test = sys.argv[2:5]
d["name"] = "svm-" + fmt
d["data"] = {"format": fmt, "train": [train], "test": [test]}
if len(sys.argv) > 5:
    d["data"]["index_base"] = int(sys.argv[5])
d["training"].update(mode="sync", max_steps=int(os.environ["STEPS"]),
                     eval_every_steps=int(os.environ["EVERY"]))
json.dump(d, sys.stdout)
PY
}
spec libsvm "$WORK/train.libsvm.gz" "$WORK/test.libsvm.gz" >svm.json
spec csv "$WORK/train.csv" "$WORK/test.csv" >csv.json
for f in svm csv; do
  "$PSFLOW_BIN" train "$f.json" --log-every "$EVERY" >"$WORK/$f.out" 2>"$WORK/$f.log" ||
    fail "psflow train $f.json exited $?: $(tail -n 3 "$WORK/$f.log")"
done
# Every figure but the throughput and the time left: loss per progress line, evaluations, the
# final result.
figures() { sed -e 's/[0-9]* examples\/s//' -e 's/ETA [0-9:]*//' -e 's/ in [0-9.]* s//' "$1" | grep -E 'loss|accuracy'; }
figures "$WORK/svm.log" >svm.fig
figures "$WORK/csv.log" >csv.fig
[ -s svm.fig ] || fail "no progress lines: $(head -n 5 "$WORK/svm.log")"
diff svm.fig csv.fig >/dev/null || fail "libsvm and csv trained differently: $(diff svm.fig csv.fig | head -n 6)"
acc=$(sed -n 's/.*test accuracy \([0-9.]*\).*/\1/p' "$WORK/svm.out")
[ -n "$acc" ] || fail "no final accuracy: $(cat "$WORK/svm.out")"
in_range "$acc" 0.78 1 || fail "accuracy $acc below 0.78 after $STEPS steps"
echo "libsvm and csv: identical figures ($(wc -l <svm.fig) lines), test accuracy $acc after $STEPS steps"

# index_base 0: ids 1..784 need inputs 0..783, so 784 is out of range.
spec libsvm "$WORK/train.libsvm.gz" "$WORK/test.libsvm.gz" 0 >base0.json
expect_exit 65 "$PSFLOW_BIN" train base0.json
grep -q 'train.libsvm.gz: line [0-9]*: feature id 784 outside 0 .. 783 (model.inputs 784, data.index_base 0)' \
  "$WORK/stderr" || fail "index_base 0: $(cat "$WORK/stderr")"
printf '0 1:0.5\n1 9:1 3:1\n' >bad.libsvm
spec libsvm "$WORK/bad.libsvm" "$WORK/bad.libsvm" >bad.json
expect_exit 65 "$PSFLOW_BIN" train bad.json
grep -q 'bad.libsvm: line 2: feature ids must increase along a line (3 after 9)' "$WORK/stderr" ||
  fail "decreasing ids: $(cat "$WORK/stderr")"
pass "libsvm: trains like the same numbers as csv (accuracy $acc); bad files refused with exit 65"
