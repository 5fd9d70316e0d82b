#!/bin/sh
# tests/cli/prepare_tifffile.sh - files written by Python's tifffile, as scDINO users have them:
# imwrite of an H x W x C array (H pages of W x C plus a {"shape": [H, W, C]} description),
# planarconfig='contig', compressed, ImageJ hyperstacks and C x H x W stacks.  The shards must
# hold tifffile.imread's array (channels-last files transposed to C x H x W).
. "$top_srcdir/tests/lib.sh"
[ "$PYTHON3" = none ] && skip "no python3 with h5py and numpy"
"$PYTHON3" -c 'import tifffile' 2>/dev/null || skip "python3 has no tifffile (Debian: python3-tifffile)"
scratch prepare_tifffile
cat >write.py <<'EOF2'
import numpy as np, os, tifffile
rng = np.random.default_rng(5)
def img():
    return rng.integers(0, 60000, (50, 50, 5)).astype(np.uint16)
os.makedirs("hwc/A"); os.makedirs("hwc/B")
tifffile.imwrite("hwc/A/1_default.tif", img())                      # 50 pages of 50 x 5
tifffile.imwrite("hwc/A/2_contig.tif", img(), planarconfig="contig", photometric="minisblack")
tifffile.imwrite("hwc/B/3_zlib.tif", img(), compression="zlib")
tifffile.imwrite("hwc/B/4_separate.tif", np.ascontiguousarray(img().transpose(2, 0, 1)),
                 photometric="minisblack", planarconfig="separate", metadata={"axes": "SYX"})
os.makedirs("chw/A")
tifffile.imwrite("chw/A/1_stack.tif", rng.integers(0, 999, (5, 40, 40)).astype(np.uint16))
tifffile.imwrite("chw/A/2_imagej.tif", rng.integers(0, 999, (5, 40, 40)).astype(np.uint16), imagej=True,
                 metadata={"axes": "CYX"})
EOF2
expect_exit 0 "$PYTHON3" write.py
for t in hwc chw; do
  cat >$t.nml <<EOF2
&control calculation = 'prepare', verbosity = 0 /
&data tiff_dir = '$t', shard_dir = '$t.shards' /
EOF2
  expect_exit 0 "$SCDINO" $t.nml
done
cat >check.py <<'EOF2'
import h5py, numpy as np, tifffile
for tree, hwc in (("hwc", True), ("chw", False)):
    m = h5py.File(tree + ".shards/manifest.h5", "r")
    for name in m["shards"].asstr():
        s = h5py.File(tree + ".shards/" + name, "r")
        for img, rel in zip(s["images"][:], s["paths"].asstr()):
            a = tifffile.imread(tree + "/" + rel)
            if hwc and a.shape[-1] == 5:
                a = a.transpose(2, 0, 1)   # what scDINO's loader indexes as [:, :, channel]
            assert img.shape == a.shape and np.array_equal(img, a), (tree, rel, img.shape, a.shape)
            print(tree, rel, "ok")
EOF2
expect_exit 0 "$PYTHON3" check.py
expect_grep 'hwc A/1_default.tif ok'
expect_grep 'hwc B/3_zlib.tif ok'
expect_grep 'hwc B/4_separate.tif ok'
expect_grep 'chw A/2_imagej.tif ok'
finish
